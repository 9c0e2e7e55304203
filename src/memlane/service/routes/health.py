"""Liveness and version (no key needed)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from memlane import __version__

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


class Version(BaseModel):
    name: str
    version: str


@router.get("/health", operation_id="health")
async def health() -> Health:
    """The server is up."""
    return Health(status="ok")


@router.get("/version", operation_id="version")
async def version() -> Version:
    """memlane's version."""
    return Version(name="memlane", version=__version__)
