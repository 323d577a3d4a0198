"""binary-resolver: resolves plugins' required binaries with abxpkg (request/reply ``binaries.resolve``)."""
