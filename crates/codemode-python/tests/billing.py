"""The billing tools the agent-framework adapter tests share: a quick lookup, a slow call that
suspends a cell under ``SLOW`` (0.8 s against a 0.3 s ``timeoutMs``), and the cell using both."""

from __future__ import annotations

import asyncio

from codemode import tool

SLOW = {"tools": {"codeMode": {"timeoutMs": 300}}}


@tool(read_only=True)
def find_customer(email: str) -> dict:
    """Looks a customer up by email."""
    return {"id": "c-42", "name": "Ada", "email": email}


async def open_invoices(customer_id: str) -> list:
    """Open invoices of a customer (slow: a billing system)."""
    await asyncio.sleep(0.8)
    return [{"id": "inv-1", "amount": 120.5}, {"id": "inv-2", "amount": 79.5}]


CELL = """
const c = await tools.find_customer({ email: "ada@example.com" });
const invoices = await tools.open_invoices({ customer_id: c.id });
return { name: c.name, owed: invoices.reduce((s, i) => s + i.amount, 0) };
"""
