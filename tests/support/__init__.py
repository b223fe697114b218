"""The one set of test helpers: loopback networking and raw exchanges (net), the stack
started in-process (stack), upstreams of every kind (upstreams), forward proxies and TLS
(peers), the command line (cli), logs as data (logs), recordings, cut and split helpers
(cuts), the reference parser (oracle) and the differential comparison (differential)."""
