"""An engine whose model costs what a GPU model costs per call: a fixed part and a small part per image."""
