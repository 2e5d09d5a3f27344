"""Benchmark and workload data: nothing else in spark_ivm imports this package.

- `run`: the benchmark, TPC-H queries as incremental views against running the queries
  (`python -m spark_ivm.bench`, `./build.sh bench`);
- `report`: its summary rows, Markdown report and charts, from the JSON of its results;
- `tpch`: TPC-H data generated with tpchgen-cli, loaded into Delta tables and changed (the demo, the
  benchmark and the tests use it), and the queries of `sql/tpch/`;
- `orderbook`: the order-book queries of `sql/orderbook/` and a random stream of order-book events.
"""
