"""``memledger bench cluster``: N API processes and M worker processes on one PostgreSQL and one Redis, under load.

The layout of docs/operations.md ("Many machines"), on one machine: ``serve --no-worker`` x N behind
the clients, ``memledger worker`` x M, a loopback fake of the Messages API answering after a fixed
latency, and a Redis server of the benchmark's own (so that it can be restarted). K clients, each an
account with its own token, save pairs of pins through the API processes (round robin, the next one
when one does not answer) and report a turn after each pair; every scope's consolidation merges the
pair. For each M the load runs for a while and the database says how many runs settled; then, at
one M, the same load with faults: a worker killed (``kill -9``) while runs are in flight, an API
process killed, Redis restarted. Killed processes are started again, as a supervisor would.

Counted from the database afterwards, never from what the processes said:

* ``lost_saves``: saves a client was answered for (it holds the record's id) that are not in
  ``memory_records``;
* ``double_applied``: runs with more applied operations in the event log than the run counted;
* ``unsettled``: runs still pending or running once the load stopped and the queue had time to
  drain (the janitor's grace included).

Everything lives in a PostgreSQL schema of its own (dropped at the end) and a Redis server of its
own on a free port; every child is in a process group of its own, killed at the end.
"""

from worker.cluster.bench import run_cluster
from worker.cluster.report import ClusterPlan, ClusterReport, format_report, report_json
from worker.errors import ClusterError

__all__ = ["ClusterError", "ClusterPlan", "ClusterReport", "format_report", "report_json", "run_cluster"]
