"""An engine whose model records the images of each predict call, to show requests batched together."""
