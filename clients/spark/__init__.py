"""PySpark integration of Rebalancer.

Modules (import them directly; nothing here imports pyspark, so the package stays importable without it):

* :mod:`clients.spark.routing` — key → key group (``xxhash64`` pmod G, in the JVM), the routing table as column
  expressions, exact placement (``repartition`` by a route value that hashes to the routed partition);
* :mod:`clients.spark.stats` — per-batch statistics with Spark aggregations (records/bytes per key group, records
  per partition, communication between keyed stages);
* :mod:`clients.spark.placement`, :mod:`clients.spark.state`, :mod:`clients.spark.partials` — keyed state placed by
  the routing table (restores, migrations of moved key groups only) and the mergeable aggregations;
* :mod:`clients.spark.driver` — :class:`~clients.spark.driver.RebalancingDriver`, the ``foreachBatch`` function
  that talks to the controller and applies placements at batch boundaries;
* :mod:`clients.spark.config` — its options: :class:`~clients.spark.config.ControllerConfig`,
  :class:`~clients.spark.config.DurabilityConfig`;
* :mod:`clients.spark.control`, :mod:`clients.spark.layout` — the conversation with the controller (registration,
  statistics as arrays in the job's key-group order, placements, proposals, back-off);
* :mod:`clients.spark.functions`, :mod:`clients.spark.recipes` — the per-key pandas function API
  (:class:`~clients.spark.functions.KeyedFunction`) and ready-made functions (sessions, top-N);
* :mod:`clients.spark.chain` — :class:`~clients.spark.chain.OperatorChain`, several keyed operators in one query as
  the operators of one controller job;
* :mod:`clients.spark.progress` — :class:`~clients.spark.progress.RebalancerProgressListener`, the driver's figures
  next to Spark's streaming progress;
* :mod:`clients.spark.store` — durable, versioned state (Parquet deltas and snapshots, commit records);
* :mod:`clients.spark.reports` — :class:`~clients.spark.reports.BatchReport`, what the driver reports per batch;
* :mod:`clients.spark.sink` — :class:`~clients.spark.sink.BatchIdSink`, exactly-once output by batch id;
* :mod:`clients.spark.gedik` — adapter for Gedik's partitioning functions;
* :mod:`benchmarks.bench_spark_routing`, :mod:`benchmarks.spark_demo`, :mod:`clients.spark.example`
  (``example_sessions``, ``example_chain``) — measurements, ``make demo`` and the README examples.
"""
