"""What requests may hold in memory: the body budget (REST and gRPC), the decode budget of images' pixels, the count
of threads held by predicts that overran, and memory handed back to the system after bursts of large bodies."""
