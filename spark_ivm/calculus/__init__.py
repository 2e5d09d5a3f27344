"""The aggregate calculus: the language every later stage works in. Imports no other stage.

- `expressions`: the expression nodes and their smart constructors;
- `analysis`: structural facts about expressions (variables, schemas, relations read, renaming);
- `printer`, `parser`: the text form of expressions (plans are stored as this text) and its reader;
- `delta`: the delta of an expression under a batch of changes to one relation;
- `functions`: the deterministic scalar functions expressions may call, with reference implementations;
- `evaluator`: the reference evaluator over in-memory databases, the oracle of the tests.
"""
