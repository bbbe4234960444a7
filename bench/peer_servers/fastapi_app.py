"""The demo served in the shape of a first-party Chariot engine: a FastAPI app whose POST route takes the V2 body,
does the work in FastAPI's thread pool and answers with a JSONResponse, served by uvicorn in one process:

    uvicorn fastapi_app:app --host 127.0.0.1 --port 8080
"""

from __future__ import annotations

import json

from demo_answer import MODEL, Demo
from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

demo = Demo()
app = FastAPI()


@app.get("/ready")
async def ready() -> JSONResponse:
    return JSONResponse({"status": "ready"})


@app.post(f"/v2/models/{MODEL}/infer")
async def infer(request: Request) -> JSONResponse:
    body = await request.body()
    try:
        answer = await run_in_threadpool(lambda: demo.answer(json.loads(body)))
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from exc
    return JSONResponse(answer)
