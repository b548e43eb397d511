"""Journal gaps: what the audit says where the journal lost events (issue 35).

The journal drops events only when it cannot write them (a write error, an event JSON
cannot encode); each drop is journaled afterwards as a `journal_dropped` event with the
`count` of events lost and their time span, `gap_from_ms` .. `gap_to_ms` (journals older
than issue 35 have no span: their `ts_ms`, which is later than every event it counts,
stands for its end). A record whose `delivered` or `dead_lettered` event was among them
looks lost, and is not: the audit cannot tell.

So a record with no outcome journaled that was fetched no later than the gap's end is
*unknown: journal gap*, never lost; `lost` keeps only the records fetched after the last
gap, whose outcome would have been journaled. A record fetched before a gap and genuinely
lost is reported unknown too: the report says so in its headline, with the gap's span and
the dropped count, rather than claim a loss it cannot prove.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


@dataclass(frozen=True, slots=True)
class JournalGap:
    """Every `journal_dropped` of the journal summed: the events lost and their span."""

    dropped: int
    from_ms: int
    to_ms: int


def journal_gap(events: DataFrame) -> JournalGap | None:
    """The journal's gaps, from its valid events (one small aggregation; None: no gap)."""
    c = F.col
    row = events.filter(c("type") == "journal_dropped").agg(
        F.sum(F.coalesce(c("count"), F.lit(0))).alias("dropped"),
        F.min(F.coalesce(c("gap_from_ms"), c("ts_ms"))).alias("from_ms"),
        F.max(F.coalesce(c("gap_to_ms"), c("ts_ms"))).alias("to_ms"),
    ).first()
    if row is None or row["to_ms"] is None:
        return None
    return JournalGap(int(row["dropped"]), int(row["from_ms"]), int(row["to_ms"]))


def split_lost(records: DataFrame, gap: JournalGap | None) -> DataFrame:
    """Adds `unknown` (lost-looking records fetched no later than the gap's end) and takes
    them out of `lost`. `records` has `lost` and `last_fetched_ms`."""
    c = F.col
    if gap is None:
        return records.withColumn("unknown", F.lit(False))
    in_gap = c("lost") & F.coalesce(c("last_fetched_ms") <= F.lit(gap.to_ms), F.lit(False))
    return records.withColumns({"unknown": in_gap, "lost": c("lost") & ~in_gap})
