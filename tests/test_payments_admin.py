"""The settlement log admin: read-only, filters, search, totals per tool, CSV export."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import factory
import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from payments.models import SettlementLog

pytestmark = pytest.mark.django_db

LIST = reverse("admin:payments_settlementlog_changelist")
EXPORT = reverse("admin:payments_settlementlog_export")


class SettlementLogFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SettlementLog

    tool = "dir2mcp.search"
    status = SettlementLog.Status.SETTLED
    price = "0.01"
    amount = "10000"
    asset = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
    network = "eip155:84532"
    pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    payer = factory.Sequence(lambda n: f"0x{n:040x}")
    transaction = factory.Sequence(lambda n: f"0x{n:064x}")
    request_hash = factory.Sequence(lambda n: f"{n:064x}")


@pytest.fixture
def staff(client):
    user = User.objects.create_superuser("auditor", "auditor@example.com", "pw-for-tests-only")
    client.force_login(user)
    return client


@pytest.fixture
def rows():
    return {
        "search": SettlementLogFactory.create_batch(3),
        "ask": SettlementLogFactory.create_batch(2, tool="dir2mcp.ask", amount="50000", price="0.05"),
        "failed": SettlementLogFactory(
            tool="dir2mcp.ask", status="failed", error_reason="insufficient_funds", transaction=""
        ),
        "mainnet": SettlementLogFactory(
            network="eip155:8453", payer="0xfeedfacefeedfacefeedfacefeedfacefeedface"
        ),
    }


def _ids(response) -> set[int]:
    return {row.pk for row in response.context["cl"].result_list}


def test_changelist_lists_rows_and_is_read_only(staff, rows):
    response = staff.get(LIST)
    assert response.status_code == 200 and len(_ids(response)) == 7
    assert b"Add settlement log" not in response.content
    row = rows["search"][0]
    detail = staff.get(reverse("admin:payments_settlementlog_change", args=[row.pk]))
    assert detail.status_code == 200 and b'name="_save"' not in detail.content
    post = staff.post(reverse("admin:payments_settlementlog_change", args=[row.pk]), {"status": "failed"})
    assert post.status_code == 403
    assert staff.get(reverse("admin:payments_settlementlog_add")).status_code == 403
    assert SettlementLog.objects.get(pk=row.pk).status == "settled"


@pytest.mark.parametrize(
    "query, expected",
    [
        pytest.param("status__exact=failed", {"failed"}, id="status"),
        pytest.param("tool=dir2mcp.ask", {"ask", "failed"}, id="tool"),
        pytest.param("network=eip155:8453", {"mainnet"}, id="network"),
    ],
)
def test_filters_narrow_the_list(staff, rows, query, expected):
    wanted = {r.pk for key in expected for r in (rows[key] if isinstance(rows[key], list) else [rows[key]])}
    assert _ids(staff.get(f"{LIST}?{query}")) == wanted


def test_date_filter_excludes_older_rows(staff, rows):
    old = rows["mainnet"]
    SettlementLog.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=40))
    since = (timezone.now() - timedelta(days=7)).replace(microsecond=0).isoformat()
    response = staff.get(LIST, {"created_at__gte": since})
    assert old.pk not in _ids(response) and len(_ids(response)) == 6


def test_search_by_payer_and_by_transaction(staff, rows):
    assert _ids(staff.get(LIST, {"q": "0xfeedface"})) == {rows["mainnet"].pk}
    tx = rows["ask"][1].transaction
    assert _ids(staff.get(LIST, {"q": tx})) == {rows["ask"][1].pk}


def test_totals_per_tool_follow_the_filters(staff, rows):
    totals = {(t.tool, t.network): t for t in staff.get(LIST).context["tool_totals"]}
    ask = totals[("dir2mcp.ask", "eip155:84532")]
    assert (ask.settled, ask.failed, ask.amount) == (2, 1, 100000)
    assert totals[("dir2mcp.search", "eip155:84532")].amount == 30000
    response = staff.get(f"{LIST}?network=eip155:8453")
    assert [(t.tool, t.amount) for t in response.context["tool_totals"]] == [("dir2mcp.search", 10000)]
    assert b"Totals per tool" in response.content


def test_totals_per_tool_by_outcome_and_since(rows):
    from payments import reports

    SettlementLogFactory(tool="dir2mcp.ask", status="required", amount="50000", transaction="")
    old = SettlementLogFactory(tool="dir2mcp.ask", amount="999")
    SettlementLog.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))

    since = timezone.now() - timedelta(days=1)
    totals = reports.totals_per_tool(SettlementLog.objects.all(), since=since, by_outcome=True)
    got = [(t.outcome, t.tool, t.network, t.count, t.amount) for t in totals]
    assert got == [
        ("failed", "dir2mcp.ask", "eip155:84532", 1, 10000),  # the amount of the refused payment
        ("required", "dir2mcp.ask", "eip155:84532", 1, 50000),  # the amount asked
        ("settled", "dir2mcp.ask", "eip155:84532", 2, 100000),  # not the 999 of two days ago
        ("settled", "dir2mcp.search", "eip155:8453", 1, 10000),
        ("settled", "dir2mcp.search", "eip155:84532", 3, 30000),
    ]
    # without the grouping: one total per tool, only settled amounts, every event counted
    per_tool = {
        (t.tool, t.network): t for t in reports.totals_per_tool(SettlementLog.objects.all(), since=since)
    }
    ask = per_tool[("dir2mcp.ask", "eip155:84532")]
    assert (ask.outcome, ask.count, ask.settled, ask.failed, ask.challenges, ask.amount) == (
        "",
        4,
        2,
        1,
        1,
        100000,
    )
    everything = reports.totals_per_tool(SettlementLog.objects.all())
    assert sum(t.amount for t in everything) == 140000 + 999


def test_csv_export_of_the_filtered_list(staff, rows):
    response = staff.get(EXPORT, {"status__exact": "failed"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(table) == 1 and table[0]["error_reason"] == "insufficient_funds"
    assert table[0]["tool"] == "dir2mcp.ask" and table[0]["request_hash"] == rows["failed"].request_hash


def test_csv_export_action_on_selected_rows(staff, rows):
    chosen = [rows["search"][0].pk, rows["mainnet"].pk]
    response = staff.post(LIST, {"action": "export_csv", "_selected_action": chosen})
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {int(r["id"]) for r in table} == set(chosen)


@pytest.mark.parametrize(
    "cell",
    [
        pytest.param("=HYPERLINK(1)", id="equals"),
        pytest.param("+1+cmd|' /C calc'!A0", id="plus"),
        pytest.param("-2+3", id="minus"),
        pytest.param("@SUM(A1)", id="at"),
        pytest.param("\t=1+1", id="tab"),
        pytest.param("\r=1+1", id="carriage-return"),
        pytest.param("\n=1+1", id="line-feed"),
        pytest.param("\uff1dHYPERLINK(1)", id="full-width-equals"),
        pytest.param("\uff0b1", id="full-width-plus"),
        pytest.param("\uff0d1", id="full-width-minus"),
        pytest.param("\uff20SUM(A1)", id="full-width-at"),
        pytest.param("  =1+1", id="spaces-then-equals"),
    ],
)
def test_csv_cells_cannot_inject_formulas(staff, cell):
    SettlementLogFactory(tool=cell, payer=cell[:66], error_reason=cell)
    table = list(csv.DictReader(io.StringIO(staff.get(EXPORT).content.decode(), newline="")))
    assert [table[0][name] for name in ("tool", "payer", "error_reason")] == ["'" + cell] * 3


@pytest.mark.parametrize("cell", ["dir2mcp.search", "0xfeedface", "a=b", "x-y", "user@example.com", ""])
def test_csv_cells_that_cannot_start_a_formula_are_kept_as_they_are(staff, cell):
    SettlementLogFactory(tool=cell)
    table = list(csv.DictReader(io.StringIO(staff.get(EXPORT).content.decode(), newline="")))
    assert table[0]["tool"] == cell


def test_a_payer_the_facilitator_did_not_confirm_is_shown_as_unverified(staff):
    claimed = SettlementLogFactory(status="failed", payer="0x" + "ab" * 20, payer_verified=False)
    confirmed = SettlementLogFactory(payer="0x" + "cd" * 20, payer_verified=True)
    page = staff.get(LIST).content.decode()
    assert f"{claimed.payer} (unverified)" in page
    assert confirmed.payer in page and f"{confirmed.payer} (unverified)" not in page
    table = {
        r["payer"]: r["payer_verified"]
        for r in csv.DictReader(io.StringIO(staff.get(EXPORT).content.decode()))
    }
    assert table == {claimed.payer: "False", confirmed.payer: "True"}


def test_export_needs_a_staff_login(client, rows):
    response = client.get(EXPORT)
    assert response.status_code == 302 and "login" in response["Location"]
