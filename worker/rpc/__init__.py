"""The methods the worker adds to the record protocol, in one table (:mod:`worker.rpc.methods`), and the
protocol over stdio (:mod:`worker.rpc.stdio`). ``POST /rpc`` serves the same table (:mod:`worker.http.server`)."""
