"""Keys and namespaces: how s3kv names what it stores, byte for byte as vLLM does.

Pure functions and value types, no I/O: ``namespace`` turns a vLLM run config into the
namespace folder exactly as vLLM's ``FileMapper`` does; ``keys`` maps a block hash to its
key and back (``parse``); ``manifest`` is the strict ``config.json`` parser and writer;
``location`` parses ``s3://bucket/prefix`` and directory locations; ``chains`` names a
block's parent. May import only the foundations (``s3kv.errors``, ``s3kv.settings``,
``s3kv.integrity``, ...), never stores, transfers or operations.
"""
