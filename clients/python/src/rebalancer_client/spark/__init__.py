"""PySpark integration of Rebalancer.

Modules (import them directly; nothing here imports pyspark, so the package stays importable without it):

* :mod:`rebalancer_client.spark.routing` — key → key group (``xxhash64`` pmod G, in the JVM), the routing table as
  column expressions, exact placement (``repartition`` by a route value that hashes to the routed partition);
* :mod:`rebalancer_client.spark.stats` — per-batch statistics with Spark aggregations (records/bytes per key group,
  records per partition, communication between keyed stages);
* :mod:`rebalancer_client.spark.placement`, :mod:`rebalancer_client.spark.state`,
  :mod:`rebalancer_client.spark.partials` — keyed state placed by the routing table (restores, migrations of moved key
  groups only) and the mergeable aggregations;
* :mod:`rebalancer_client.spark.driver` — :class:`~rebalancer_client.spark.driver.RebalancingDriver`, the
  ``foreachBatch`` function that talks to the controller and applies placements at batch boundaries;
* :mod:`rebalancer_client.spark.config` — its options: :class:`~rebalancer_client.spark.config.ControllerConfig`,
  :class:`~rebalancer_client.spark.config.DurabilityConfig`;
* :mod:`rebalancer_client.spark.control`, :mod:`rebalancer_client.spark.layout` — the conversation with the controller
  (registration, statistics as arrays in the job's key-group order, placements, proposals, back-off);
* :mod:`rebalancer_client.spark.functions`, :mod:`rebalancer_client.spark.recipes` — the per-key pandas function API
  (:class:`~rebalancer_client.spark.functions.KeyedFunction`) and ready-made functions (sessions, top-N);
* :mod:`rebalancer_client.spark.group_state`, :mod:`rebalancer_client.spark.group_state_run` — functions written
  against Spark's ``applyInPandasWithState`` interface (:class:`~rebalancer_client.spark.group_state.GroupState`,
  per-key timeouts, typed state); :mod:`rebalancer_client.spark.schemas` — the schema checks of a restart;
* :mod:`rebalancer_client.spark.chain` — :class:`~rebalancer_client.spark.chain.OperatorChain`, several keyed operators
  in one query as the operators of one controller job;
* :mod:`rebalancer_client.spark.progress` — :class:`~rebalancer_client.spark.progress.RebalancerProgressListener`, the
  driver's figures next to Spark's streaming progress;
* :mod:`rebalancer_client.spark.store` — durable, versioned state (Parquet deltas and snapshots, commit records);
* :mod:`rebalancer_client.spark.reports` — :class:`~rebalancer_client.spark.reports.BatchReport`, what the driver
  reports per batch;
* :mod:`rebalancer_client.spark.sink` — :class:`~rebalancer_client.spark.sink.BatchIdSink`, exactly-once output by batch
  id;
* :mod:`rebalancer_client.spark.gedik` — adapter for Gedik's partitioning functions;
* :mod:`benchmarks.bench_spark_routing`, :mod:`benchmarks.spark_demo`, :mod:`rebalancer_client.spark.example`
  (``example_sessions``, ``example_chain``) — measurements, ``make demo`` and the README examples.
"""
