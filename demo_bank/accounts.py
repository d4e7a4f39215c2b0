"""What both banks serve alike: open and read accounts, read the transfers ledger, errors, and
the app around them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from demo_bank.schema import accounts, now_ms, transfers


class AccountIn(BaseModel):
    account_id: str = Field(min_length=1, max_length=64)
    balance: int = Field(0, ge=0, description="Opening balance in cents")


class AccountOut(BaseModel):
    account_id: str
    balance: int


class LedgerRow(BaseModel):
    transfer_id: str
    account_id: str
    counterparty: str
    amount: int
    direction: str
    created_at: int


class TransferOut(BaseModel):
    transfer_id: str
    entries: list[LedgerRow]


def error(status: int, code: str, message: str, **detail: Any) -> JSONResponse:
    """The broker's error envelope, reused by the banks."""
    return JSONResponse(
        {"error": {"code": code, "message": message, "detail": detail}}, status_code=status
    )


Running = Callable[[FastAPI], AbstractAsyncContextManager[Any]]


def bank_app(
    title: str, engine: Engine, sessions: Callable[[], Session], running: Running
) -> FastAPI:
    """A bank's app: the ledger routes on ``sessions``; ``running(app)`` holds the bank's broker
    client for the app's life, and ``engine`` is disposed after it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with running(app):
                yield
        finally:
            engine.dispose()

    app = FastAPI(title=title, lifespan=lifespan)
    app.include_router(ledger_router(sessions))
    return app


def started(start: Callable[[], object], stop: Callable[[], object]) -> Running:
    """What :func:`bank_app` runs for a client started and stopped by plain calls (RocketMQ's)."""

    @asynccontextmanager
    async def running(app: FastAPI) -> AsyncIterator[None]:
        start()
        try:
            yield
        finally:
            stop()

    return running


def ledger_router(sessions: Callable[[], Session]) -> APIRouter:
    router = APIRouter()

    @router.post("/accounts", status_code=201, response_model=AccountOut)
    def open_account(body: AccountIn) -> Any:
        try:
            with sessions() as session, session.begin():
                session.execute(insert(accounts).values(**body.model_dump(), created_at=now_ms()))
        except IntegrityError:
            return error(409, "ACCOUNT_EXISTS", f"account {body.account_id} exists")
        return AccountOut(account_id=body.account_id, balance=body.balance)

    @router.get("/accounts/{account_id}", response_model=AccountOut)
    def get_account(account_id: str) -> Any:
        with sessions() as session:
            balance = session.execute(
                select(accounts.c.balance).where(accounts.c.account_id == account_id)
            ).scalar_one_or_none()
        if balance is None:
            return error(404, "ACCOUNT_NOT_FOUND", f"no account {account_id}")
        return AccountOut(account_id=account_id, balance=balance)

    @router.get("/transfers/{transfer_id}", response_model=TransferOut)
    def get_transfer(transfer_id: str) -> Any:
        with sessions() as session:
            rows = session.execute(
                select(transfers).where(transfers.c.transfer_id == transfer_id)
            ).mappings()
            entries = [LedgerRow.model_validate(dict(row)) for row in rows]
        if not entries:
            return error(404, "TRANSFER_NOT_FOUND", f"no ledger entry for {transfer_id}")
        return TransferOut(transfer_id=transfer_id, entries=entries)

    @router.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return router
