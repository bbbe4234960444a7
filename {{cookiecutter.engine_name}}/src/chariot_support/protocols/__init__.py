"""Every wire format the engine speaks, each a pair: parse bytes or a message into the one `Request`, render an
`Answer` back (chariot-v2-kserve, V2 over REST (JSON, and its binary tensor data extension) and gRPC, chariot-v2, KServe V1
and TF Serving); images and tensors."""
