"""Subqueries and outer joins in the SQL front end: scalar subqueries (correlated or not, in WHERE,
HAVING, the select list), comparisons with a subquery's MIN or MAX, EXISTS, IN and NOT IN with SQL's
NULL semantics, grouped derived tables, LEFT/RIGHT/FULL joins. The view's rows on databases with NULLs
and duplicates must be those sqlite3 gives for the same query."""

from __future__ import annotations

import pytest

from spark_ivm.frontend.translate import translate

from test_sql_frontend import SCHEMAS, database, normalized, sqlite_with, to_sqlite, view_rows

NESTED_QUERIES = [
    # scalar subqueries
    "SELECT a, b FROM R WHERE a > (SELECT SUM(c) / 10 FROM S WHERE S.b = R.b)",
    "SELECT b, SUM(a) FROM R WHERE a * 10 < (SELECT SUM(c) FROM S WHERE S.b = R.b) GROUP BY b",
    "SELECT a FROM R WHERE b = (SELECT COUNT(*) FROM S WHERE S.b = R.a)",
    "SELECT a FROM R WHERE b <= (SELECT COUNT(c) FROM S WHERE S.b = R.a)",
    "SELECT COUNT(*) FROM R WHERE a < (SELECT AVG(c) FROM S) / 10",
    "SELECT COUNT(*) FROM R WHERE (SELECT SUM(c) FROM S WHERE S.b = R.b AND S.c > R.a) IS NULL",
    "SELECT a, (SELECT COUNT(*) FROM S WHERE S.b = R.b) AS n FROM R",
    "SELECT a, (SELECT SUM(c) FROM S WHERE S.b = R.b) AS n FROM R",
    "SELECT b, COUNT(*), (SELECT SUM(c) FROM S WHERE S.b = R.b) FROM R GROUP BY b",
    "SELECT b, SUM(a) FROM R GROUP BY b HAVING SUM(a) > (SELECT COUNT(*) FROM S) / 3",
    "SELECT b, SUM(a) FROM R GROUP BY b HAVING COUNT(*) >= (SELECT COUNT(*) FROM S WHERE S.b = R.b)",
    "SELECT SUM(a * (SELECT COUNT(*) FROM S WHERE S.b = R.b)) FROM R",
    "SELECT a FROM R WHERE a > (SELECT SUM(c) FROM S WHERE S.b = R.b AND S.c > (SELECT COUNT(*) FROM T WHERE T.c = S.c))",
    # MIN and MAX of a subquery, compared
    "SELECT a, b FROM R WHERE a = (SELECT MIN(r2.a) FROM R r2 WHERE r2.b = R.b)",
    "SELECT a, b FROM R WHERE a >= (SELECT MAX(r2.a) FROM R r2 WHERE r2.b = R.b)",
    "SELECT a, b FROM R WHERE a * 10 < (SELECT MIN(c) FROM S WHERE S.b = R.b)",
    "SELECT a, b FROM R WHERE a * 10 <= (SELECT MAX(c) FROM S)",
    "SELECT a, b FROM R WHERE (SELECT MAX(c) FROM S WHERE S.b = R.b) > a * 10",
    "SELECT a, b FROM R WHERE a * 10 <> (SELECT MIN(c) FROM S WHERE S.b = R.b)",
    "SELECT a, b FROM R WHERE NOT (a * 10 > (SELECT MIN(c) FROM S WHERE S.b = R.b))",
    # EXISTS, IN, NOT IN
    "SELECT a, b FROM R WHERE EXISTS (SELECT 1 FROM S WHERE S.b = R.b)",
    "SELECT a, b FROM R WHERE NOT EXISTS (SELECT * FROM S WHERE S.b = R.b AND S.c > 10)",
    "SELECT COUNT(*) FROM R WHERE EXISTS (SELECT 1 FROM T)",
    "SELECT b, COUNT(*) FROM R WHERE a = 1 OR EXISTS (SELECT 1 FROM S WHERE S.b = R.a) GROUP BY b",
    "SELECT a, b FROM R WHERE b IN (SELECT b FROM S WHERE c > 10)",
    "SELECT a, b FROM R WHERE b NOT IN (SELECT b FROM S WHERE c > 10)",
    "SELECT a, b FROM R WHERE b NOT IN (SELECT b FROM S WHERE c >= 20)",
    "SELECT a, b FROM R WHERE a NOT IN (SELECT b FROM S WHERE S.c = R.b * 10)",
    "SELECT a, b FROM R WHERE NOT (b NOT IN (SELECT b FROM S WHERE c > 10))",
    "SELECT a, b FROM R WHERE b IN (SELECT b FROM S GROUP BY b HAVING COUNT(*) > 1)",
    "SELECT a FROM R WHERE a + 1 IN (SELECT b FROM S WHERE EXISTS (SELECT 1 FROM T WHERE T.c = S.c))",
    # grouped derived tables
    "SELECT n, COUNT(*) FROM (SELECT b, COUNT(a) AS n FROM R GROUP BY b) t GROUP BY n",
    "SELECT t.b, t.total, S.c FROM (SELECT b, SUM(a) AS total FROM R GROUP BY b) t JOIN S ON t.b = S.b",
    "SELECT total FROM (SELECT SUM(a) AS total FROM R) t",
    "SELECT b FROM (SELECT b, SUM(a) AS total FROM R GROUP BY b HAVING COUNT(*) > 1) t",
    "WITH v AS (SELECT b, SUM(a) AS total FROM R GROUP BY b) "
    "SELECT b, total FROM v WHERE total = (SELECT MAX(total) FROM v)",
    # outer joins
    "SELECT R.a, S.c FROM R LEFT JOIN S ON R.b = S.b",
    "SELECT R.a, S.c FROM R LEFT OUTER JOIN S ON R.b = S.b AND S.c > R.a * 10",
    "SELECT R.b, COUNT(S.c), COUNT(*) FROM R LEFT JOIN S ON R.b = S.b GROUP BY R.b",
    "SELECT R.a, S.c, T.d FROM R LEFT JOIN S ON R.b = S.b LEFT JOIN T ON S.c = T.c",
    "SELECT R.a, S.c, T.d FROM R JOIN S ON R.b = S.b LEFT JOIN T ON S.c = T.c AND T.d <> 'y'",
    "SELECT R.a, S.b, S.c FROM R RIGHT JOIN S ON R.b = S.b",
    "SELECT R.a, R.b, S.c FROM R FULL OUTER JOIN S ON R.b = S.b",
    "SELECT COUNT(*), SUM(S.c) FROM R FULL JOIN S ON R.b = S.b AND R.a < 3 WHERE S.c IS NULL OR R.a IS NULL",
    "SELECT R.a, S.c FROM R LEFT JOIN S ON R.a > S.b WHERE S.c IS NULL",
    "SELECT x.a, S.c FROM (SELECT a, b + 1 AS b1, 1 AS one FROM R) x LEFT JOIN S ON x.b1 = S.b WHERE x.one = 1",
    "SELECT S.b, x.one FROM S LEFT JOIN (SELECT b, 1 AS one FROM R) x ON x.b = S.b",
]


@pytest.mark.parametrize("sql", NESTED_QUERIES)
def test_view_rows_match_sqlite(sql):
    query = translate(sql, SCHEMAS)
    expected = sqlite_with().execute(to_sqlite(sql)).fetchall()
    assert normalized(view_rows(query, database()), False) == normalized(expected, False)
