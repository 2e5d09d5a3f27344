"""Queries shared by the compiler's and the runtime's differential tests.

Tables: R(a, b), S(b, c), T(c, d) with small integer domains, NULLs and duplicate rows.
`NESTED_QUERIES` use subqueries (scalar, MIN/MAX compared, EXISTS, IN, NOT IN, grouped derived
tables) and outer joins: the compiler's differential test runs them; the runtime's runs `QUERIES`
and adds `NESTED_QUERIES` once its SQL generation handles nested aggregates.
"""

SCHEMAS = {"R": ["a", "b"], "S": ["b", "c"], "T": ["c", "d"]}

QUERIES = [
    # single table
    "SELECT SUM(a) FROM R",
    "SELECT COUNT(*) FROM R",
    "SELECT b, SUM(a), COUNT(*) FROM R GROUP BY b",
    "SELECT b, COUNT(a) FROM R GROUP BY b",
    "SELECT b, AVG(a) FROM R GROUP BY b",
    "SELECT SUM(a * b) FROM R WHERE a > 1",
    "SELECT SUM(a + b) FROM R",
    "SELECT a, b FROM R",
    "SELECT a FROM R WHERE b IS NULL",
    "SELECT b, SUM(a) FROM R WHERE a BETWEEN 1 AND 2 GROUP BY b",
    "SELECT b, COUNT(*) FROM R WHERE a IN (0, 2, 3) GROUP BY b",
    "SELECT b, COUNT(*) FROM R WHERE a NOT IN (1, 2) GROUP BY b",
    "SELECT b, COUNT(*) FROM R WHERE a = 1 OR b = 2 GROUP BY b",
    "SELECT b, COUNT(*) FROM R WHERE NOT (a = 1 AND b = 2) GROUP BY b",
    "SELECT SUM(CASE WHEN a > 1 THEN b ELSE 0 END) FROM R",
    "SELECT a + 1, COUNT(*) FROM R GROUP BY a + 1",
    "SELECT b, SUM(a) FROM R GROUP BY b HAVING SUM(a) > 1",
    "SELECT SUM(a) FROM R WHERE a IS NOT NULL AND b <> 3",
    # joins
    "SELECT SUM(R.a) FROM R, S WHERE R.b = S.b",
    "SELECT SUM(R.a * S.c) FROM R JOIN S ON R.b = S.b",
    "SELECT S.c, SUM(R.a) FROM R, S WHERE R.b = S.b GROUP BY S.c",
    "SELECT R.a, S.c FROM R, S WHERE R.b = S.b",
    "SELECT COUNT(*) FROM R, S, T WHERE R.b = S.b AND S.c = T.c",
    "SELECT T.d, SUM(R.a * T.d) FROM R, S, T WHERE R.b = S.b AND S.c = T.c GROUP BY T.d",
    "SELECT SUM(R.a) FROM R, S WHERE R.b = S.b AND S.c > 1",
    "SELECT COUNT(*) FROM R, S",
    "SELECT R.b, COUNT(*) FROM R, S WHERE R.a < S.c GROUP BY R.b",
    "SELECT SUM(R.a) FROM R, S WHERE R.b = S.b AND R.a <= S.c",
    "SELECT S.b, SUM(CASE WHEN R.a > S.c THEN 1 ELSE 0 END) FROM R JOIN S ON R.b = S.b GROUP BY S.b",
    # a CASE's condition filters the rows summed; its count of non-NULL values is a sum of filters
    "SELECT S.c, SUM(CASE WHEN R.a > 1 THEN S.c * R.b END), AVG(CASE WHEN S.c = 2 THEN R.a ELSE 1 END) "
    "FROM R JOIN S ON R.b = S.b GROUP BY S.c",
    "SELECT COUNT(*) FROM R JOIN S ON R.b = S.b JOIN T ON S.c = T.c WHERE T.d IS NOT NULL",
    # b is shared by three relations (r1, S, r2): its higher-order maps are split there (like TPC-H Q5's nation)
    "SELECT r1.a, S.c, COUNT(*) FROM R r1, S, R r2, T WHERE r1.b = S.b AND r2.b = S.b AND S.c = T.c AND T.d = r2.a "
    "GROUP BY r1.a, S.c",
    # self-joins
    "SELECT SUM(r1.a * r2.b) FROM R r1, R r2 WHERE r1.b = r2.a",
    "SELECT r1.a, COUNT(*) FROM R r1, R r2 WHERE r1.b = r2.b GROUP BY r1.a",
    "SELECT COUNT(*) FROM R r1, R r2, R r3 WHERE r1.b = r2.a AND r2.b = r3.a",
    "SELECT r1.a AS a1, r2.a AS a2 FROM R r1 JOIN R r2 ON r1.b = r2.b WHERE r1.a < r2.a",
    # derived tables and CTEs
    "SELECT x, COUNT(*) FROM (SELECT a AS x, b FROM R WHERE b > 0) AS sub GROUP BY x",
    "WITH j AS (SELECT R.a, S.c FROM R JOIN S ON R.b = S.b) SELECT c, SUM(a) FROM j GROUP BY c",
    "SELECT SUM(v) FROM (SELECT a * 2 AS v FROM R) AS d",
    # mixed
    "SELECT S.c, COUNT(*), SUM(R.a), AVG(R.a) FROM R JOIN S ON R.b = S.b WHERE R.a IS NOT NULL GROUP BY S.c",
    "SELECT COALESCE(a, 0), COUNT(*) FROM R GROUP BY COALESCE(a, 0)",
    "SELECT SUM(a) FROM R WHERE a = b",
    "SELECT b, SUM(a) - COUNT(*) FROM R GROUP BY b",
    "SELECT S.c, COUNT(*) FROM R, S WHERE R.b = S.b OR R.a = S.c GROUP BY S.c",
    # bag operators and aggregates kept as multisets of values
    "SELECT DISTINCT R.b, S.c FROM R JOIN S ON R.b = S.b",
    "SELECT b, MIN(a) FROM R GROUP BY b",
    "SELECT S.c, MAX(R.a), COUNT(*) FROM R, S WHERE R.b = S.b GROUP BY S.c",
    "SELECT b, COUNT(DISTINCT a) FROM R GROUP BY b",
    "SELECT a FROM R UNION ALL SELECT c FROM S",
    "SELECT a, b FROM R UNION SELECT b, c FROM S",
    "SELECT b FROM R EXCEPT ALL SELECT b FROM S",
    "SELECT R.b FROM R, S WHERE R.a = S.c INTERSECT SELECT c FROM T",
]

NESTED_QUERIES = [
    # scalar subqueries: correlated or not, in WHERE, the select list, HAVING, inside an aggregate
    "SELECT b, SUM(a) FROM R WHERE a > (SELECT SUM(c) FROM S WHERE S.b = R.b) GROUP BY b",
    "SELECT a, b FROM R WHERE b = (SELECT COUNT(*) FROM S WHERE S.b = R.a)",
    "SELECT COUNT(*) FROM R WHERE a < (SELECT AVG(c) FROM S)",
    "SELECT a, (SELECT SUM(c) FROM S WHERE S.b = R.b) AS total FROM R",
    "SELECT b, SUM(a) FROM R GROUP BY b HAVING SUM(a) > (SELECT COUNT(*) FROM S WHERE S.b = R.b)",
    "SELECT SUM(a * (SELECT COUNT(c) FROM S WHERE S.b = R.b)) FROM R",
    # MIN and MAX of a subquery, compared
    "SELECT a, b FROM R WHERE a = (SELECT MIN(r2.a) FROM R r2 WHERE r2.b = R.b)",
    "SELECT a, b FROM R WHERE a > (SELECT MAX(c) FROM S WHERE S.b = R.b)",
    "WITH t AS (SELECT b AS k, SUM(a) AS x FROM R GROUP BY b) "
    "SELECT S.c, t.x FROM S, t WHERE S.b = t.k AND t.x = (SELECT MAX(x) FROM t)",
    "SELECT a FROM R WHERE a <= (SELECT MIN(c) FROM S)",
    # sums over the rows above or below a value of the enclosing row
    "SELECT SUM(a) FROM R WHERE 2 * (SELECT SUM(c) FROM S) > (SELECT SUM(c) FROM S s2 WHERE s2.b > R.b)",
    "SELECT b, COUNT(*) FROM R WHERE (SELECT COUNT(*) FROM S WHERE S.c <= R.a) > 1 GROUP BY b",
    "SELECT a, (SELECT SUM(c) FROM S WHERE S.b >= R.b AND S.c < R.a) AS below FROM R",
    "SELECT a FROM R WHERE (SELECT SUM(c) FROM S WHERE S.b = R.b AND S.c < R.a) < 3",
    # EXISTS, IN, NOT IN
    "SELECT a, b FROM R WHERE EXISTS (SELECT 1 FROM S WHERE S.b = R.b)",
    "SELECT b, COUNT(*) FROM R WHERE NOT EXISTS (SELECT 1 FROM S WHERE S.b = R.b AND S.c > R.a) GROUP BY b",
    "SELECT a FROM R WHERE b IN (SELECT c FROM S WHERE S.b > 0)",
    "SELECT a, b FROM R WHERE b NOT IN (SELECT c FROM S)",
    "SELECT a FROM R WHERE a NOT IN (SELECT b FROM S WHERE S.c = R.b)",
    "SELECT a FROM R WHERE b IN (SELECT b FROM S GROUP BY b HAVING SUM(c) > 2)",
    "SELECT T.d, COUNT(*) FROM T WHERE EXISTS (SELECT 1 FROM S WHERE S.c = T.c AND S.b NOT IN (SELECT a FROM R)) "
    "GROUP BY T.d",
    # grouped derived tables
    "SELECT n, COUNT(*) FROM (SELECT b, COUNT(a) AS n FROM R GROUP BY b) t GROUP BY n",
    # outer joins
    "SELECT R.a, S.c FROM R LEFT JOIN S ON R.b = S.b",
    "SELECT R.b, COUNT(S.c) FROM R LEFT JOIN S ON R.b = S.b AND S.c > R.a GROUP BY R.b",
    "SELECT R.a, S.c, T.d FROM R LEFT JOIN S ON R.b = S.b LEFT JOIN T ON S.c = T.c",
    "SELECT R.a, S.c FROM R RIGHT JOIN S ON R.b = S.b",
    "SELECT R.a, S.b FROM R FULL JOIN S ON R.b = S.b AND R.a < S.c",
    "SELECT S.c, COUNT(*) FROM R JOIN S ON R.b = S.b LEFT JOIN T ON S.c = T.c WHERE T.d IS NULL GROUP BY S.c",
]


def deep(kind: str, n: int, r: str = "R", s: str = "S") -> str:
    """A query over tables r(a, b) and s(c, …) nesting one construct n levels deep, or chaining n terms."""
    return {
        "parentheses": "SELECT " + "(" * n + "a" + ")" * n + f" AS s FROM {r}",
        "functions": "SELECT " + "abs(" * n + "a" + ")" * n + f" AS s FROM {r}",
        "case": "SELECT " + "CASE WHEN a > 1 THEN " * n + "a" + " ELSE 0 END" * n + f" AS s FROM {r}",
        "not": f"SELECT a FROM {r} WHERE " + "NOT " * n + "a = 1",
        "negation": "SELECT " + "- " * n + f"a AS s FROM {r}",
        "subqueries": "SELECT a FROM " + "(SELECT a, b FROM " * n + r + ") x" * n,
        "exists": f"SELECT a FROM {r} WHERE " + f"EXISTS (SELECT 1 FROM {s} WHERE " * n + "c = 1" + ")" * n,
        "sum": "SELECT b, SUM(" + " + ".join(["a"] * n) + f") FROM {r} GROUP BY b",
        "concatenation": "SELECT " + " || ".join(["CAST(a AS STRING)"] * n) + f" AS s FROM {r}",
        "and": f"SELECT a FROM {r} WHERE " + " AND ".join(f"a <> {i}" for i in range(n)),
        "or": f"SELECT COUNT(*) FROM {r} WHERE " + " OR ".join(f"a = {i}" for i in range(n)),
        "union": " UNION ALL ".join([f"SELECT a FROM {r}"] * n),
        "parenthesized sum": "SELECT " + "(" * n + "a" + " + a)" * n + f" AS s FROM {r}",
    }[kind]


DEEP_KINDS = ("parentheses", "functions", "case", "not", "negation", "subqueries", "exists", "sum", "concatenation",
              "and", "or", "union", "parenthesized sum")
