"""An engine whose predict misbehaves on request, to prove the engine survives its author's mistakes."""
