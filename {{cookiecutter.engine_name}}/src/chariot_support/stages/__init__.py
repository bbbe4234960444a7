"""Where a request's time goes: each inference request's stages (reading its body, waiting for admission, parsing,
waiting for a thread, a model copy or a batch, decoding, predict, checking and formatting the results, writing the
answer), taken once with the clocks the engine already reads, and shown in the request's log line, its
Server-Timing header, Prometheus histograms and Triton's statistics (triton/)."""
