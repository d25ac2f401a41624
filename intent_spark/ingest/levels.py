"""Item levels: the item of an event can be the source's own entity (a merchant, a product, a
video) or a coarser label that entity carries as a ``field:value`` token (its MCC, product type,
category id, tag). At a coarse level every event's item becomes its label, so the split, the
models and the metrics run unchanged on labels; a line whose item has no label is a reject."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.sources import EventsSpec
from intent_spark.ingest.events import FIELD_CHECKED, PARSED, REASON_CHECKED, pad_id, raw_field

LABEL = "_item_label"  # the label, added to each parsed line beside the raw fields
_FINE = "_fine_item"


def token_value(tokens: Column, token_field: str) -> Column:
    """The value of the first ``token_field:`` token, null when there is none. Tokens are sorted,
    so an item with several (a video's tags) takes the smallest, whatever the file order."""
    prefix = f"{token_field}:"
    first = F.get(F.filter(tokens, lambda t: t.startswith(prefix)), 0)
    return F.substring(first, len(prefix) + 1, 1 << 20)


def item_labels(items: DataFrame, token_field: str) -> DataFrame:
    """``item_id, label`` for every catalogue item (label null when the item carries none)."""
    return items.select(S.ITEM_ID, token_value(F.col(S.TOKENS), token_field).alias(LABEL))


def label_lines(
    checked: DataFrame, labels: DataFrame, spec: EventsSpec, token_field: str, level: str
) -> DataFrame:
    """The checked lines, each good one carrying its item's label (and its padded item id, which
    the events keep as an attribute); a good line whose item has no label becomes a reject."""
    keyed = checked.withColumn(_FINE, pad_id(raw_field(spec.item), spec.id_pad))
    joined = keyed.join(labels.withColumnRenamed(S.ITEM_ID, _FINE), _FINE, "left")
    unlabelled = F.col(REASON_CHECKED).isNull() & F.col(LABEL).isNull()
    reason = F.concat(
        F.lit("item "), F.col(_FINE), F.lit(f" has no {token_field} token for item level {level}")
    )
    return joined.withColumns(
        {
            REASON_CHECKED: F.when(unlabelled, reason).otherwise(F.col(REASON_CHECKED)),
            FIELD_CHECKED: F.when(unlabelled, F.lit(spec.item)).otherwise(F.col(FIELD_CHECKED)),
            PARSED: F.col(PARSED).withField(LABEL, F.col(LABEL)).withField(_quoted(spec.item), F.col(_FINE)),
        }
    ).drop(_FINE, LABEL)


def _quoted(name: str) -> str:
    """A raw field name as withField reads it: a path, so ``Merchant Name`` needs back quotes."""
    return "`" + name.replace("`", "``") + "`"


def labelled_spec(spec: EventsSpec) -> EventsSpec:
    """How events are read from labelled lines: the label is the item, the source's item id an
    attribute under its field's name."""
    attributes = spec.attributes if spec.item in spec.attributes else (*spec.attributes, spec.item)
    return replace(spec, item=LABEL, id_pad=0, attributes=attributes)


def label_items(labels: DataFrame, token_field: str, dataset: str) -> DataFrame:
    """The catalogue at a coarse level: one item per label, its title and category the label and
    its one token ``field:label``, so a content model scores a label it has seen by that token."""
    label = F.col(LABEL)
    return (
        labels.where(label.isNotNull())
        .select(label)
        .distinct()
        .select(
            F.lit(dataset).alias(S.DATASET),
            label.alias(S.ITEM_ID),
            label.alias(S.TITLE),
            label.alias(S.CATEGORY),
            F.lit(None).cast("string").alias(S.BRAND),
            F.array(F.concat(F.lit(f"{token_field}:"), label)).alias(S.TOKENS),
        )
    )
