"""The benchmark harness behind bench/run_bench.py, by responsibility (each module says what it holds):

    workloads  what runs: the code snippets and their expected output, scenario sizes, the targets
    servers    what runs it: the servers under test, how they are launched, the checkout they run from
    procfs     /proc readers for a server's pid and the processes under it
    drivers    how a server is talked to: raw JSON-RPC over stdio, or the official SDK client
    stats      percentiles, summaries, ratios
    scenarios  the measurements: preflight, calls, flood, startup, memory
    report     the markdown report and the machine it was measured on

Imported as `harness` (not `bench.harness`): bench/'s scripts run as scripts, with bench/ first on
sys.path, and put it there themselves when they are imported instead.
"""
