"""The vLLM tier's data path, in a process of its own beside EngineCore (or in-process).

vLLM runs a secondary tier inside EngineCore, beside its scheduler, and its CPU tier is
one ``MAP_SHARED`` file in /dev/shm that every vLLM process maps. Here the tier's loads
and stores run in an I/O process that maps the same file: its client (awscrt) writes a
load's bytes straight into the rows and sends a store's from them, and no part's
callback, checksum or retry takes EngineCore's GIL. EngineCore sends one order per job
and reads one reply per job (:mod:`s3kv.vllm._io_process` starts, watches and restarts
the process). Where the rows are not a shareable file mapping, the same
:class:`~s3kv.worker.datapath.DataPath` runs in EngineCore's process.

    orders     the messages: an order per job, a reply per job (its report, what its
               requests answered, what its loads found)
    channel    frames of those messages over a socket (no message lost or torn)
    doorbell   a counter both processes map: EngineCore reads only when it rang
    region     the rows' file mapping: found in the engine's /proc, mapped in the worker
    loads      the tier's rules for what a load meets (bad checksums, no checksum)
    datapath   runs orders against rows: uploads and downloads of s3kv.transfers
    main       the I/O process: started with fork+exec, ends with its engine

Nothing here imports vLLM (nor torch): the worker starts in a fraction of a second.
"""
