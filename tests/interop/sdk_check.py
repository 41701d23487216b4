"""The official Azure SDK for Python (azure-data-tables) against tables tablesql
uses, on Azurite's development account. Run by tests/it/interop.rs.

    sdk_check.py verify TABLE DUMP     read TABLE with the SDK and check that every
                                       entity equals the one in DUMP, the JSON array
                                       `tablesql scan TABLE --format json` printed
    sdk_check.py write TABLE REPORT    (re)create TABLE, write `sdk_entities()` into it
                                       with the SDK, and save what was written to
                                       REPORT as JSON (see `report`)
    sdk_check.py expect TABLE REPORT   read TABLE with the SDK and check that it holds
                                       exactly the entities of REPORT (the form `write`
                                       saves), each property of the same EDM type and value

Exits non-zero with a message naming the entity and property on any mismatch.

How the SDK maps types (azure/data/tables/_serialize.py and _deserialize.py of
azure-data-tables 12.7.0): str is Edm.String; bool Edm.Boolean; int Edm.Int32
(an unannotated int outside the Int32 range reads as Int64); float Edm.Double,
NaN and the infinities as "NaN", "Infinity", "-Infinity"; datetime Edm.DateTime,
written with 6 fractional digits and read as TablesEntityDatetime, which keeps
the service's text in `tables_service_value`; UUID Edm.Guid; bytes Edm.Binary.
Int64 is read, and must be written, as EntityProperty(value, EdmType.INT64).
"""

import base64
import json
import math
import sys
from datetime import datetime, timezone
from uuid import UUID

from azure.data.tables import EdmType, EntityProperty, TableClient

CONNECTION = "UseDevelopmentStorage=true"
# Bounded: a dead emulator fails in seconds, not after the SDK's 10 retries.
CLIENT_OPTIONS = {"retry_total": 2, "connection_timeout": 10, "read_timeout": 60}
KEYS = ("PartitionKey", "RowKey")

PARTITION = "sdk"


def sdk_entities():
    """What `write` stores: every EDM type, written as SDK users write them.
    tests/it/interop.rs (`expected_sdk_entities`) expects exactly these back."""
    return [
        {
            "PartitionKey": PARTITION,
            "RowKey": "strings",
            "plain": "hello",
            "quotes": "it's \"quoted\"",
            "unicode": "Zoë Ørsted, 日本語, 🏃 (outside the BMP)",
            "empty": "",
            "explicit": EntityProperty("typed", EdmType.STRING),
        },
        {
            "PartitionKey": PARTITION,
            "RowKey": "integers",
            "int32": 42,
            "int32_min": -(2**31),
            "int32_max": 2**31 - 1,
            "int32_explicit": EntityProperty(-7, EdmType.INT32),
            "int64_small": EntityProperty(5, EdmType.INT64),
            "int64_2p53p1": EntityProperty(2**53 + 1, EdmType.INT64),
            "int64_min": EntityProperty(-(2**63), EdmType.INT64),
            "int64_max": EntityProperty(2**63 - 1, EdmType.INT64),
        },
        {
            "PartitionKey": PARTITION,
            "RowKey": "doubles",
            "two": 2.0,
            "tenth": 0.1,
            "huge_negative": -1.5e300,
            "subnormal": 5e-324,
            "nan": float("nan"),
            "infinity": float("inf"),
            "negative_infinity": float("-inf"),
            "explicit": EntityProperty(3.0, EdmType.DOUBLE),
        },
        {
            "PartitionKey": PARTITION,
            "RowKey": "other types, é'",
            "yes": True,
            "no": False,
            "explicit_bool": EntityProperty(True, EdmType.BOOLEAN),
            "micros": datetime(2024, 2, 29, 12, 34, 56, 123456, tzinfo=timezone.utc),
            "ticks": EntityProperty("2024-02-29T12:34:56.1234567Z", EdmType.DATETIME),
            "guid": UUID("c9da6455-213d-42c9-9a79-3e9149a57833"),
            "bytes": bytes(range(256)),
        },
    ]


class Mismatch(Exception):
    """The SDK and tablesql disagree."""


def typed(value):
    """(EDM type name, value) of a property as the SDK holds it."""
    # EntityProperty is a tuple and bool an int: both are tested before the rest.
    if isinstance(value, EntityProperty):
        return EdmType(value.edm_type).value, value.value
    if isinstance(value, bool):
        return "Edm.Boolean", value
    if isinstance(value, int):
        return ("Edm.Int32" if -(2**31) <= value < 2**31 else "Edm.Int64"), value
    for python_type, edm in ((float, "Edm.Double"), (str, "Edm.String"), (datetime, "Edm.DateTime"),
                             (UUID, "Edm.Guid"), (bytes, "Edm.Binary")):
        if isinstance(value, python_type):
            return edm, value
    raise Mismatch(f"a value of unexpected Python type {type(value).__name__}: {value!r}")


def typed_json(name, obj):
    """(EDM type name, value) of property `name` of an entity in the service's
    JSON (minimal metadata): the annotation, else the JSON type decides."""
    value = obj[name]
    annotation = obj.get(name + "@odata.type")
    if annotation is not None:
        return annotation, value
    if isinstance(value, bool):
        return "Edm.Boolean", value
    if isinstance(value, int):
        return ("Edm.Int32" if -(2**31) <= value < 2**31 else "Edm.Int64"), value
    if isinstance(value, float):
        return "Edm.Double", value
    if isinstance(value, str):
        return "Edm.String", value
    raise Mismatch(f"property {name!r} has unexpected JSON {value!r}")


def datetime_text(value):
    """A DateTime as the service's text with exactly 7 fractional digits (its
    precision, 100 ns): the SDK's own text where it kept it, else its datetime."""
    if isinstance(value, datetime):
        service = getattr(value, "tables_service_value", "")
        value = service or value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if not value.endswith("Z"):
        raise Mismatch(f"DateTime {value!r} is not in UTC")
    whole, _, fraction = value[:-1].partition(".")
    if len(fraction) > 7:
        raise Mismatch(f"DateTime {value!r} has more than 7 fractional digits")
    return f"{whole}.{fraction:0<7}Z"


def canonical(edm, value):
    """A value in one comparable form per type, from the SDK's Python value or
    the service's JSON text alike. Doubles as float.hex: exact, NaN equals
    itself and -0.0 differs from 0.0."""
    if edm in ("Edm.Int32", "Edm.Int64"):
        return int(value)
    if edm == "Edm.Double":
        return float(value).hex()
    if edm == "Edm.DateTime":
        return datetime_text(value)
    if edm == "Edm.Guid":
        return UUID(str(value))
    if edm == "Edm.Binary":
        return base64.b64decode(value, validate=True) if isinstance(value, str) else bytes(value)
    if edm in ("Edm.String", "Edm.Boolean"):
        return value
    raise Mismatch(f"unknown EDM type {edm!r}")


def to_json(edm, value):
    """A value as the service's JSON spells it (the Rust test decodes it with
    tablesql's own `value_from_json`)."""
    if edm == "Edm.Int64":
        return str(int(value))
    if edm == "Edm.Double":
        value = float(value)
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if edm == "Edm.DateTime":
        return datetime_text(value)
    if edm == "Edm.Guid":
        return str(UUID(str(value)))
    if edm == "Edm.Binary":
        return base64.b64encode(value).decode("ascii")
    return value


def client(table):
    return TableClient.from_connection_string(CONNECTION, table, **CLIENT_OPTIONS)


def key_of(entity):
    return tuple(entity[k] for k in KEYS)


def compare(dumped, read):
    """Checks one entity the SDK read against tablesql's JSON of it; returns the
    number of custom properties compared."""
    where = f"entity {key_of(dumped)}"
    names = {n for n in dumped if "@" not in n and not n.startswith("odata.") and n != "Timestamp"}
    if names != set(read):
        raise Mismatch(f"{where}: tablesql has properties {sorted(names)}, the SDK {sorted(read)}")
    for name in sorted(names - set(KEYS)):
        want_type, want = typed_json(name, dumped)
        got_type, got = typed(read[name])
        if got_type != want_type:
            raise Mismatch(f"{where}, property {name!r}: tablesql has {want_type}, the SDK {got_type} ({got!r})")
        want_value, got_value = canonical(want_type, want), canonical(got_type, got)
        if want_value != got_value:
            raise Mismatch(
                f"{where}, property {name!r} ({want_type}): tablesql has {want_value!r}, "
                f"the SDK {got_value!r} (as the SDK returned it: {got!r})"
            )
    if datetime_text(dumped["Timestamp"]) != datetime_text(read.metadata["timestamp"]):
        raise Mismatch(f"{where}: Timestamp {dumped['Timestamp']} vs the SDK's {read.metadata['timestamp']!r}")
    if dumped["odata.etag"] != read.metadata["etag"]:
        raise Mismatch(f"{where}: ETag {dumped['odata.etag']} vs the SDK's {read.metadata['etag']}")
    return len(names) - len(KEYS)


def verify(table, dump_path):
    with open(dump_path, encoding="utf-8") as f:
        dumped = json.load(f)
    read = list(client(table).list_entities())
    dumped_keys = [key_of(e) for e in dumped]
    read_keys = [key_of(e) for e in read]
    if dumped_keys != read_keys:
        only_dump = sorted(set(dumped_keys) - set(read_keys))[:5]
        only_sdk = sorted(set(read_keys) - set(dumped_keys))[:5]
        raise Mismatch(
            f"{table}: tablesql listed {len(dumped_keys)} entities, the SDK {len(read_keys)} "
            f"(only tablesql: {only_dump}, only the SDK: {only_sdk}, or the order differs)"
        )
    properties = sum(compare(d, r) for d, r in zip(dumped, read))
    print(f"sdk_check verify: {table}: {len(read)} entities, {properties} properties "
          "of the same EDM type and value as tablesql read them")


def report(entities):
    """What `write` wrote: per entity its keys and, per property, [EDM type, value
    in the service's JSON form]."""
    out = []
    for entity in entities:
        properties = {}
        for name, value in entity.items():
            if name not in KEYS:
                edm, plain = typed(value)
                properties[name] = [edm, to_json(edm, plain)]
        out.append({"PartitionKey": entity["PartitionKey"], "RowKey": entity["RowKey"], "properties": properties})
    return out


def write(table, report_path):
    entities = sdk_entities()
    tc = client(table)
    tc.delete_table()  # a table left by an earlier run; no error if there is none
    tc.create_table()
    for entity in entities:
        tc.create_entity(entity)
    with open(report_path, "w", encoding="utf-8") as f:
        json.dump(report(entities), f, ensure_ascii=False, indent=1)
    print(f"sdk_check write: {table}: {len(entities)} entities written with the SDK")


def expect(table, report_path):
    with open(report_path, encoding="utf-8") as f:
        wanted = json.load(f)
    read = {key_of(e): e for e in client(table).list_entities()}
    want_keys = sorted((w["PartitionKey"], w["RowKey"]) for w in wanted)
    if want_keys != sorted(read):
        raise Mismatch(f"{table}: expected entities {want_keys}, the SDK read {sorted(read)}")
    for w in wanted:
        key = (w["PartitionKey"], w["RowKey"])
        got = {n: v for n, v in read[key].items() if n not in KEYS}
        if set(w["properties"]) != set(got):
            raise Mismatch(f"entity {key}: expected properties {sorted(w['properties'])}, the SDK read {sorted(got)}")
        for name, (want_type, want) in sorted(w["properties"].items()):
            got_type, value = typed(got[name])
            if got_type != want_type:
                raise Mismatch(f"entity {key}, property {name!r}: expected {want_type}, the SDK read {got_type} ({value!r})")
            # No value expected: any of the type (a write's random id).
            if want is not None and canonical(want_type, want) != canonical(got_type, value):
                raise Mismatch(
                    f"entity {key}, property {name!r} ({want_type}): expected {canonical(want_type, want)!r}, "
                    f"the SDK read {canonical(got_type, value)!r}"
                )
    print(f"sdk_check expect: {table}: {len(wanted)} entities as expected")


def main(argv):
    modes = {"verify": verify, "write": write, "expect": expect}
    if len(argv) != 4 or argv[1] not in modes:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        modes[argv[1]](argv[2], argv[3])
    except Mismatch as e:
        print(f"sdk_check {argv[1]}: MISMATCH: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
