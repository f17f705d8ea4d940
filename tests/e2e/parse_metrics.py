#!/usr/bin/env python3
"""Parses a Prometheus text exposition file with the Prometheus Python client's own parser
(Debian python3-prometheus-client) and prints one sample per line, for remote_e2e_test:

    name{label="value",...} value      (labels sorted; no braces without labels)

Exits 1 with the parser's error when the text is not valid exposition format."""
import sys

from prometheus_client.parser import text_string_to_metric_families


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as error:  # the parser raises ValueError and friends
        print(f"not Prometheus text format: {error}", file=sys.stderr)
        return 1
    for family in families:
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            name = f"{sample.name}{{{labels}}}" if labels else sample.name
            print(f"{name} {sample.value!r}")
        print(f"# TYPE {family.name} {family.type}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
