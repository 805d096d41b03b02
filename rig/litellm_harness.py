"""Run LiteLLM's real proxy in-process, with deployment writes that need no database.

LiteLLM's own ``/model/new`` and ``/model/delete`` keep deployments in PostgreSQL
through Prisma, whose native engines cannot be fetched on these machines. This
harness serves just those two routes with small handlers placed ahead of LiteLLM's
(Starlette dispatches to the first matching route). They use LiteLLM's own auth
dependency and request types and write into the proxy's real ``Router``, so what
reconcile sees afterwards (``/model/info``, ``/health``, chat proxying, auth and
error shapes) is LiteLLM's unchanged code.

Run it with the LiteLLM virtual environment's python; the master key comes from
the environment, never the command line:

    LITELLM_MASTER_KEY=... .venv-litellm/bin/python rig/litellm_harness.py --port 4000
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' parameter types at
# run time, and those types are imported inside install_deployment_routes.
import argparse
import faulthandler
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated

# LiteLLM reads these at import time: no cost-map download, no telemetry, and no
# `.env` file picked up from whatever directory the harness starts in.
OFFLINE_ENVIRONMENT = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY_DISABLED": "true",
    "LITELLM_MODE": "PRODUCTION",
    "LITELLM_LOG": "WARNING",
}

# With a config file LiteLLM always builds its Router at start-up, even for an
# empty model list, so the write handlers below always have one to change.
# Clients connect directly (no proxy in front), which is what an empty
# trusted_proxy_ranges tells LiteLLM's login throttle.
EMPTY_PROXY_CONFIG = "model_list: []\ngeneral_settings:\n  trusted_proxy_ranges: []\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Read the listen address; the master key is deliberately not an option."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    return parser.parse_args(argv)


def prepare_environment(config_dir: Path) -> None:
    """Set LiteLLM's offline switches and point it at an empty config, before import."""
    os.environ.update(OFFLINE_ENVIRONMENT)
    config_path = config_dir / "litellm-config.yaml"
    config_path.write_text(EMPTY_PROXY_CONFIG)
    os.environ["CONFIG_FILE_PATH"] = str(config_path)


def install_deployment_routes(app) -> None:  # FastAPI is only in the LiteLLM venv
    """Put database-free /model/new and /model/delete in front of LiteLLM's routes."""
    from fastapi import APIRouter, Depends, status
    from litellm.proxy import proxy_server
    from litellm.proxy._types import (
        LitellmUserRoles,
        ModelInfoDelete,
        ProxyErrorTypes,
        ProxyException,
        UserAPIKeyAuth,
    )
    from litellm.proxy.auth.user_api_key_auth import user_api_key_auth
    from litellm.types.router import Deployment

    # LiteLLM's own dependency: the same master-key check its DB-backed routes run.
    Caller = Annotated[UserAPIKeyAuth, Depends(user_api_key_auth)]  # a type alias

    def refuse(code: int, message: str) -> ProxyException:
        """An error in the shape LiteLLM's own model routes give (an OpenAI error object)."""
        return ProxyException(
            message=str({"error": message}),
            type=ProxyErrorTypes.auth_error,
            param="None",
            code=code,
        )

    def require_proxy_admin(caller: UserAPIKeyAuth) -> None:
        """LiteLLM lets only a proxy admin (the master key) write non-team models."""
        if caller.user_role != LitellmUserRoles.PROXY_ADMIN:
            raise refuse(
                status.HTTP_403_FORBIDDEN,
                "User does not have permission to make this model call.",
            )

    def publish_model_list(router) -> None:
        """Refresh the proxy's model list (what /health probes) as its database sync does."""
        proxy_server.llm_model_list = router.get_model_list()

    async def add_model(deployment: Deployment, caller: Caller) -> dict:
        require_proxy_admin(caller)
        deployment.model_info.db_model = True  # what a database-backed proxy marks it as
        router = proxy_server.llm_router  # built at start-up from the config
        added = router.add_deployment(deployment)
        if added is None:
            # A database-backed proxy fails the insert on the duplicate id the same way.
            raise refuse(
                status.HTTP_500_INTERNAL_SERVER_ERROR,
                "Failed to add model to db. Check your server logs for more details.",
            )
        publish_model_list(router)
        return {
            "model_id": added.model_info.id,
            "model_name": added.model_name,
            "model_info": added.model_info.model_dump(exclude_none=True, mode="json"),
        }

    async def delete_model(body: ModelInfoDelete, caller: Caller) -> dict:
        require_proxy_admin(caller)
        router = proxy_server.llm_router  # built at start-up from the config
        if router.delete_deployment(id=body.id) is None:
            raise refuse(status.HTTP_400_BAD_REQUEST, f"Model with id={body.id} not found in db")
        publish_model_list(router)
        return {"message": f"Model: {body.id} deleted successfully"}

    writes = APIRouter()
    writes.add_api_route("/model/new", add_model, methods=["POST"], tags=["model management"])
    writes.add_api_route("/model/delete", delete_model, methods=["POST"], tags=["model management"])
    app.router.routes[:0] = writes.routes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not os.environ.get("LITELLM_MASTER_KEY"):
        print("litellm harness: set LITELLM_MASTER_KEY in the environment", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="llmao-litellm-") as config_dir:
        prepare_environment(Path(config_dir))
        import uvicorn
        from litellm.proxy.proxy_server import app

        install_deployment_routes(app)
        # A crash of the proxy's native code says where it was, in the log (all threads).
        faulthandler.enable()
        # asyncio's own loop, not uvloop: the proxy died once of SIGSEGV in our suite, during
        # a box TLS roll under load (its HTTPS connections to boxes restarting), and uvloop's
        # TLS transport has open crash reports; the proxy's code is the same on either loop.
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                    loop="asyncio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
