"""Programs that run on a measurement host: fused-TBE timing and all-to-all timing."""
