"""The contract's clauses, one module per section; `registry` is the table every other part reads."""
