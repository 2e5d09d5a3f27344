"""The SQL front end: a Spark SQL query to a `ViewQuery`, calculus aggregates and how to read them.

`translate.translate(sql, schemas)` is the entry point; the modules, in the order a query meets them:

- `source`: the query text, its tokens, its parse, and where a node stands in the text;
- `constructs`: constructs refused wherever they appear, and aggregates and Python calls where they
  cannot stand;
- `scope`: tables, variable names, FROM items and the scope of one SELECT;
- `values`: SQL values and conditions to calculus values and 0/1 factors;
- `select`: one SELECT, its FROM clause (joins, derived tables, CTEs, UNION ALL) and select list;
- `nested`: subqueries and outer joins as nested aggregates;
- `view`: the top SELECT as the view, its keys, aggregates and the Spark SQL that reads them;
- `set_operations`: a set operation as the view;
- `view_query`: the `ViewQuery` the front end hands to the compiler.
"""
