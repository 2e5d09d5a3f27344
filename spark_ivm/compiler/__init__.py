"""The compiler: a view's query (`spark_ivm.frontend.view_query.ViewQuery`) to a plan of maps and triggers.

- `viewlet`: the viewlet transform (`compile_view`, `compile_query`, `compile_maps`), with the rewrite
  rules of `spark_ivm.rules` and the policy of `spark_ivm.heuristics`;
- `plan`: the compiled plan, its maps, triggers and statements;
- `plan_json`: the plan as plain data, what the view catalog stores.
"""
