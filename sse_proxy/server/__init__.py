"""The aiohttp shell around the core: forwarding, relaying, logging. No protocol logic here."""
