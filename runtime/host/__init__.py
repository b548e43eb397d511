"""The process around the kernel: `Runtime` (start and stop order), the config schema,
the admin HTTP server, metrics, the event journal and the service plug-in protocol."""
