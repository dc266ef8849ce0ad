"""Random and mutated requests for the front doors' fuzz tests: every Kafka API at every version served (built
from kafka-python's schemas), every gRPC method of txnsim's and RocketMQ's services (from their descriptors),
with values drawn to hit edges (empty, huge, negative, null, internal names), then some bytes flipped, cut or
grown. One seeded random.Random drives it all, so a failure names the seed and index that reproduce it.

`avoid` names strings the generators never produce: the tests keep their canary data under those names, so no
random request can legitimately touch it.
"""
from __future__ import annotations

import random
import struct
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from proto import records

_INTS = (0, 1, -1, 2, 3, 7, 42, 127, -128, 255, 1000, 2**15 - 1, -(2**15), 2**31 - 1, -(2**31), 2**63 - 1,
         -(2**63), 30_000, 60_000)
_LIMITS = {"int8": 7, "int16": 15, "uint16": 16, "int32": 31, "int64": 63, "uint32": 32}


class Fuzz:
    def __init__(self, seed: int, avoid: frozenset[str], topic: str) -> None:
        self.rng = random.Random(seed)
        self.avoid = avoid
        #: a topic that exists, so that random requests reach deep into the handlers
        self.topic = topic
        self._strings = [topic, topic, "", "g", "fuzz-group", "tx-fuzz", "__consumer_offsets", "__transaction_state",
                         "RMQ_SYS_TRANS_HALF_TOPIC", "..", "../../etc", "a" * 300, "x" * 20_000, "\u00e9\u4e2d\U0001f600",
                         "consumer", "range", "cooperative-sticky", "delete", "compact", "retention.ms",
                         "max.message.bytes", "cleanup.policy", "0", "-1"]

    # ------------------------------------------------------------ values

    def string(self) -> str:
        text = self.rng.choice(self._strings) if self.rng.random() < 0.8 else self._random_text()
        return "fuzz-other" if text in self.avoid else text

    def _random_text(self) -> str:
        return "".join(chr(self.rng.randrange(32, 0x2FF)) for _ in range(self.rng.randrange(0, 40)))

    def integer(self, bits: int = 31, signed: bool = True) -> int:
        value = self.rng.choice(_INTS) if self.rng.random() < 0.7 else self.rng.randrange(-1000, 100_000)
        low, high = (-(2 ** bits), 2 ** bits - 1) if signed else (0, 2 ** bits - 1)
        return min(max(value, low), high)

    def blob(self) -> bytes:
        choice = self.rng.random()
        if choice < 0.4:
            return self.batch()
        if choice < 0.6:
            return b""
        return self.rng.randbytes(self.rng.randrange(0, 300))

    def batch(self) -> bytes:
        """A well-formed record batch (now and then with its bytes damaged, the CRC left to catch it)."""
        raw = records.encode_batch([(1000, self.rng.choice([None, b"k"]), self.rng.randbytes(self.rng.randrange(0, 40)),
                                     ())], producer_id=self.rng.choice([-1, 1, 7]),
                                   producer_epoch=self.rng.choice([-1, 0, 3]), base_sequence=self.rng.choice([-1, 0, 5]),
                                   transactional=self.rng.random() < 0.3)
        return self.mutate(raw) if self.rng.random() < 0.3 else raw

    def mutate(self, data: bytes) -> bytes:
        """Flip, cut, grow or overwrite a few bytes."""
        out = bytearray(data)
        for _ in range(self.rng.randrange(1, 4)):
            action = self.rng.randrange(5)
            if action == 0 and out:
                out[self.rng.randrange(len(out))] ^= 1 << self.rng.randrange(8)
            elif action == 1 and out:
                del out[self.rng.randrange(len(out)):]
            elif action == 2:
                at = self.rng.randrange(len(out) + 1)
                out[at:at] = self.rng.randbytes(self.rng.randrange(1, 16))
            elif action == 3 and len(out) >= 4:
                at = self.rng.randrange(len(out) - 3)
                out[at:at + 4] = struct.pack(">i", self.rng.choice([-1, 0, 2**31 - 1, 100_000, -(2**31)]))
            elif out:
                at = self.rng.randrange(len(out))
                out[at] = self.rng.choice([0x00, 0xFF, 0x7F, 0x80])
        return bytes(out)

    # ------------------------------------------------------------ Kafka requests

    def kafka_request(self, request_class: type, version: int) -> Any:
        """A request of `request_class` at `version`, every field present at that version drawn at random."""
        return self._kafka_struct(request_class, version, depth=0, top=True)

    def _kafka_struct(self, cls: type, version: int, depth: int, top: bool = False) -> Any:
        values: dict[str, Any] = {}
        for name, field in cls.fields.items():
            spec = getattr(field, "_json", {})
            if not _in(spec.get("versions", "0+"), version):
                continue
            kind = spec.get("type", "")
            nullable = _in(spec.get("nullableVersions", "none"), version)
            if nullable and self.rng.random() < 0.1:
                values[name] = None
                continue
            values[name] = self._kafka_value(cls, kind, version, depth)
        return cls(version=version, **values) if top else cls(**values)

    def _kafka_value(self, cls: type, kind: str, version: int, depth: int) -> Any:
        if kind.startswith("[]"):
            element = kind[2:]
            count = 0 if depth > 2 else self.rng.choice([0, 1, 1, 2, 3])
            return [self._kafka_value(cls, element, version, depth + 1) for _ in range(count)]
        if kind in _LIMITS:
            return self.integer(_LIMITS[kind] if not kind.startswith("uint") else _LIMITS[kind], not kind.startswith("u"))
        if kind == "bool":
            return self.rng.random() < 0.5
        if kind == "string":
            return self.string()
        if kind in ("bytes", "records"):
            return self.blob()
        if kind == "float64":
            return self.rng.choice([0.0, 1.5, -1.0, 1e300])
        if kind == "uuid":
            return None
        nested = getattr(cls, kind, None)
        if nested is None or depth > 3:
            return None
        return self._kafka_struct(nested, version, depth + 1)

    # ------------------------------------------------------------ protobuf messages

    def message(self, descriptor: Descriptor, message_class: type[Message], depth: int = 0) -> Message:
        """A protobuf message of that type, every field drawn at random (nested ones to a small depth)."""
        message = message_class()
        for field in descriptor.fields:
            if self.rng.random() < 0.3:
                continue
            repeated = field.is_repeated
            for _ in range(self.rng.choice([1, 1, 2, 3]) if repeated else 1):
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    if depth > 3 or field.message_type.GetOptions().map_entry:
                        continue
                    target = getattr(message, field.name)
                    sub = target.add() if repeated else target
                    sub.CopyFrom(self.message(field.message_type, type(sub), depth + 1))
                    continue
                value = self._proto_value(field)
                if value is None:
                    continue
                if repeated:
                    getattr(message, field.name).append(value)
                else:
                    try:
                        setattr(message, field.name, value)
                    except (ValueError, TypeError):
                        pass
        return message

    def _proto_value(self, field: FieldDescriptor) -> Any:
        t = field.type
        if t in (FieldDescriptor.TYPE_STRING,):
            return self.string()
        if t == FieldDescriptor.TYPE_BYTES:
            return self.blob()
        if t == FieldDescriptor.TYPE_BOOL:
            return self.rng.random() < 0.5
        if t == FieldDescriptor.TYPE_ENUM:
            values = [v.number for v in field.enum_type.values]
            return self.rng.choice(values + [max(values) + 7])
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return self.rng.choice([0.0, -1.0, 1e30])
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            return self.integer(32, signed=False)
        if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            return self.integer(63, signed=False)
        if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
            return self.integer(63)
        return self.integer(31)


def _in(spec: str, version: int) -> bool:
    if spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)
