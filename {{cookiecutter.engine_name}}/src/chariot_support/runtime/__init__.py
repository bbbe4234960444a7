"""The model's side of a request, in the process the model lives in: the MLServer runtime that decodes images, runs
the author's predict and checks its results within CHARIOT_PREDICT_TIMEOUT, its threads, model copies, batching
across requests, and the serving plan the settings work out."""
