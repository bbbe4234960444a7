"""What requests may hold in memory: the body budget (REST and gRPC together), the decode budget of their images'
pixels, and memory handed back to the system after bursts of large bodies."""
