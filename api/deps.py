"""Dependencies shared by the /v1 routers."""

from __future__ import annotations

from fastapi import Request

from api.node import Node


def get_node(request: Request) -> Node:
    node: Node = request.app.state.node
    return node
