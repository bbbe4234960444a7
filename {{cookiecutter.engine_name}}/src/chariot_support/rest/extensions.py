"""Triton's statistics and model configuration extensions over REST (triton/): `GET /v2/models[/<m>[/versions/<v>]]/stats`
and `GET /v2/models/<m>[/versions/<v>]/config`, answered with Triton's JSON, and errors as `{"error"}`."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.responses import Response

from chariot_support.error_bodies import json_response
from chariot_support.pipeline.data_plane import ChariotDataPlane


def install_extension_routes(app: FastAPI, data_plane: ChariotDataPlane) -> None:
    """Serve the statistics and model configuration routes, ahead of MLServer's `/v2/models/{model_name}` (which
    would take `/v2/models/stats` for the metadata of a model named "stats")."""

    async def statistics(model_name: str | None = None, model_version: str | None = None) -> Response:
        return json_response(await data_plane.model_statistics(model_name, model_version))

    async def configuration(model_name: str, model_version: str | None = None) -> Response:
        return json_response(await data_plane.model_configuration(model_name, model_version))

    before = len(app.router.routes)
    for path in (
        "/v2/models/stats",
        "/v2/models/{model_name}/stats",
        "/v2/models/{model_name}/versions/{model_version}/stats",
    ):
        app.add_api_route(path, statistics, methods=["GET"])
    for path in ("/v2/models/{model_name}/config", "/v2/models/{model_name}/versions/{model_version}/config"):
        app.add_api_route(path, configuration, methods=["GET"])
    app.router.routes[:] = [*app.router.routes[before:], *app.router.routes[:before]]
