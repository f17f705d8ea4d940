#!/usr/bin/env python3
"""The Python client types a job file's text exactly as mpsctl and the daemon's sweeps do: every
case of tests/common/field_text_cases.tsv (the table tests/api/field_text_test.cc runs against
api/field_text.h) through client/python/mpsd_client/jobfile.py, set on a real message.

Run: /usr/bin/python3 tests/client/field_text_test.py (after building the stubs), or through
CTest: ctest -R PythonFieldText.
"""

import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

from google.protobuf import descriptor_pb2  # noqa: E402

from mpsd_client import jobfile  # noqa: E402
from mpsd_client.v1 import mpsd_pb2  # noqa: E402

TABLE = os.path.join(REPO, "tests", "common", "field_text_cases.tsv")
MESSAGES = {
    "google.protobuf.FieldDescriptorProto": descriptor_pb2.FieldDescriptorProto,
}


def message_class(full_name):
    if full_name in MESSAGES:
        return MESSAGES[full_name]
    prefix = "mpsd.v1."
    assert full_name.startswith(prefix), full_name
    return getattr(mpsd_pb2, full_name[len(prefix):])


def cases():
    with open(TABLE, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            columns = ["" if c == "<empty>" else c for c in line.split("\t")]
            assert len(columns) == 4, "line %d: %r" % (number, line)
            yield (number, *columns)


def read_back(message, field):
    value = getattr(message, field.name)
    if field.label == field.LABEL_REPEATED:
        value = value[0]
    if field.cpp_type == field.CPPTYPE_BOOL:
        return "true" if value else "false"
    if field.cpp_type == field.CPPTYPE_ENUM:
        return field.enum_type.values_by_number[value].name
    if field.cpp_type in (field.CPPTYPE_FLOAT, field.CPPTYPE_DOUBLE):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return str(value)


def same_value(got, expected):
    if got == expected:
        return True
    try:
        return float(got) == float(expected)
    except ValueError:
        return False


class FieldTextTest(unittest.TestCase):
    def test_every_case_of_the_shared_table(self):
        count = 0
        for number, message_name, field_name, text, expected in cases():
            count += 1
            with self.subTest(line=number, field=field_name, text=text):
                message = message_class(message_name)()
                field = message.DESCRIPTOR.fields_by_name[field_name]
                try:
                    value = jobfile._scalar(field, text, field_name)
                    if field.label == field.LABEL_REPEATED:
                        getattr(message, field_name).append(value)
                    else:
                        setattr(message, field_name, value)
                except (jobfile.JobFileError, ValueError, TypeError) as e:
                    self.assertEqual(expected, "error", "refused: %s" % e)
                    continue
                self.assertNotEqual(expected, "error",
                                    "accepted as %r" % read_back(message, field))
                got = read_back(message, field)
                self.assertTrue(same_value(got, expected), "got %r, expected %r" % (got, expected))
        self.assertGreaterEqual(count, 40)


if __name__ == "__main__":
    unittest.main()
