"""graph/decision: one fusion decision and its reason, for nf.explain.

The partitioner (graph/partition: inlining) and the kernel grouping
(graph/grouping: epilogues, light reductions, siblings, optimizer updates)
record a `Decision` for every edge they fuse or keep apart.

Hands on: `Decision`s, listed by graph/explain.
"""

KINDS = ("inline", "epilogue", "reduction", "sibling", "update")


class Decision:
    """Whether `consumer` was fused with `producer`, how (`kind`) and why.

    kind "inline": `producer`'s body was substituted into `consumer`;
    "epilogue" / "reduction" / "update": `consumer` became a later stage of
    the kernel holding `producer`; "sibling": `consumer` shares an input
    with the stage `producer` and joined its kernel.

    >>> Decision(x2, s, True, "injective", "inline")             # doctest: +SKIP
    <x2 inlined into s: injective>
    """

    def __init__(self, producer, consumer, fused, reason, kind="inline"):
        if kind not in KINDS:
            raise ValueError(f"decision kind {kind!r} is not one of {KINDS}")
        self.producer, self.consumer, self.fused = producer, consumer, fused
        self.reason, self.kind = reason, kind

    def __repr__(self):
        if self.kind == "inline":
            verb = "inlined into" if self.fused else "kept for"
            return f"<{self.producer.name} {verb} {self.consumer.name}: {self.reason}>"
        verb = "joins" if self.fused else "kept apart from"
        return (f"<{self.consumer.name} {verb} the kernel of {self.producer.name} "
                f"({self.kind}): {self.reason}>")
