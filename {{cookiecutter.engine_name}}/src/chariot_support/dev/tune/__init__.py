"""`python -m chariot_support.dev.tune`: the engine started as in production with candidate settings, one at a time,
driven with your pictures at a sweep of concurrency and measured, and the settings (and, for a target load, the
replicas and their CPU and memory) that serve it best written out with the measurements behind them."""
