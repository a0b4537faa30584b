"""The background jobs on dramatiq: the broker (:mod:`worker.jobs.broker`), the actors that run a
consolidation or extraction run and the expiry sweep (:mod:`worker.jobs.actors`), the janitor that
recovers lost and stuck runs (:mod:`worker.jobs.janitor`), the thread that repeats them
(:mod:`worker.jobs.periodic`) and ``memledger worker``'s processes (:mod:`worker.jobs.supervisor`).
:class:`worker.runtime.Runtime` wires them together.
"""
