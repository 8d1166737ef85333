"""The tables of experiments/collect_results.py, one module per family: ``records`` (run records, statistics over
seeds), ``paper`` (Tables 2 and 3), ``readings`` (the objective's scale), ``runs``, ``scale`` (Table 1 and the
curve against N), ``studies``, ``benchmarks``, and ``markdown`` (every table by name, the documents' marked
tables)."""
