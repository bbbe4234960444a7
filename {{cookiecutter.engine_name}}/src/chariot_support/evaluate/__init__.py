"""`python -m chariot_support.evaluate DATASET`: an engine's answers on a labelled dataset scored with Chariot's own
metrics library, with a report, metrics.json and the worst images drawn."""
