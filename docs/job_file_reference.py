#!/usr/bin/env python3
"""Writes docs/job-file-reference.md from proto/mpsd/v1/mpsd.proto's comments.

One table per message a job file can reach from SubmitJobRequest (field path, type, the field's
leading comment), so the reference is the proto's own text and cannot drift from it.

  docs/job_file_reference.py                 rewrite docs/job-file-reference.md
  docs/job_file_reference.py --check         exit 1 if the committed page differs (the ctest)

Needs protoc and python3-protobuf. Paths are as a job file (and a sweep key) spells them: the
fields of TrainJob, BenchJob, EvalJob or PredictJob at the top level, beside `kind` and
SubmitJobRequest's own keys.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO = "mpsd/v1/mpsd.proto"
OUTPUT = os.path.join(ROOT, "docs", "job-file-reference.md")
# DescriptorProto field numbers in a SourceCodeInfo path: FileDescriptorProto.message_type = 4,
# DescriptorProto.field = 2, DescriptorProto.nested_type = 3.
MESSAGE, FIELD, NESTED = 4, 2, 3
SCALARS = {
    descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE: "double",
    descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT: "float",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64: "uint64",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32: "int32",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT32: "uint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "bool",
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES: "bytes",
}


def load(protoc, proto_dir):
    """The descriptors of PROTO, with comments: (messages by full name, enums by full name)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "set.pb")
        subprocess.run([protoc, "--include_imports", "--include_source_info",
                        "--descriptor_set_out=" + out, "-I", proto_dir, PROTO], check=True)
        files = descriptor_pb2.FileDescriptorSet.FromString(open(out, "rb").read())
    messages, enums = {}, {}
    for file in files.file:
        comments = {tuple(loc.path): loc.leading_comments for loc in file.source_code_info.location}

        def walk(prefix, path, message):
            name = prefix + "." + message.name
            fields = [comments.get(path + (FIELD, i), "") for i in range(len(message.field))]
            messages[name] = (message, comments.get(path, ""), fields)
            for i, nested in enumerate(message.nested_type):
                walk(name, path + (NESTED, i), nested)
            for enum in message.enum_type:
                enums[name + "." + enum.name] = enum

        for i, message in enumerate(file.message_type):
            walk("." + file.package, (MESSAGE, i), message)
        for enum in file.enum_type:
            enums["." + file.package + "." + enum.name] = enum
    return messages, enums


def one_line(comment):
    text = " ".join(line.strip() for line in comment.strip().splitlines())
    return text.replace("|", "\\|")


def type_of(field, messages, enums):
    """The field's type as a reader writes it, and the message to describe next (or None)."""
    repeated = field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE:
        entry = messages[field.type_name][0]
        if entry.options.map_entry:
            key, value = (type_of(f, messages, enums)[0] for f in entry.field)
            return "map<%s, %s>" % (key, value), None
        short = field.type_name.rsplit(".", 1)[1]
        return ("list of " if repeated else "") + "[%s](#%s)" % (short, short.lower()), \
            field.type_name
    if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_ENUM:
        values = ", ".join(v.name for v in enums[field.type_name].value)
        name = "enum " + field.type_name.rsplit(".", 1)[1] + " (" + values + ")"
    else:
        name = SCALARS[field.type]
    if field.proto3_optional:
        name = "optional " + name
    return ("list of " if repeated else "") + name, None


def paths(messages, enums, root):
    """Messages in breadth-first order from root, each with every path a job file holds it at."""
    order, reached, queue = [root], {root: [""]}, [(root, "")]
    while queue:
        name, prefix = queue.pop(0)
        for field in messages[name][0].field:
            child = type_of(field, messages, enums)[1]
            if not child:
                continue
            # SubmitJobRequest's oneof is the job file's `kind`: its fields sit at the top level.
            at = "" if name == root and field.HasField("oneof_index") else prefix + field.name
            if child not in reached:
                order.append(child)
                reached[child] = []
                queue.append((child, at + "." if at else ""))
            if at not in reached[child]:
                reached[child].append(at)
    return order, reached


def render(messages, enums):
    root = ".mpsd.v1.SubmitJobRequest"
    order, reached = paths(messages, enums, root)
    out = ["# Job file reference\n",
           "<!-- Generated by docs/job_file_reference.py from proto/mpsd/v1/mpsd.proto; "
           "do not edit. -->\n",
           "Every key a job file may hold, with the comment it has in "
           "[`proto/mpsd/v1/mpsd.proto`](../proto/mpsd/v1/mpsd.proto). A job file is YAML: "
           "`kind: TrainJob` (or `BenchJob`, `EvalJob`, `PredictJob`) and that message's "
           "fields at the top level, "
           "beside SubmitJobRequest's own keys (`priority`, `request_id`, `name`, `labels`, "
           "`after`, `sweep`). Paths are as a job file and a sweep key spell them; the "
           "daemon's errors prefix them with `train_job.`, `bench_job.`, `eval_job.` or `predict_job.`. "
           "How to use them: "
           "[job-files.md](job-files.md).\n"]
    for name in order:
        message, comment, field_comments = messages[name]
        prefix = reached[name][0] + "." if reached[name][0] else ""
        out.append("## %s\n" % message.name)
        if comment.strip():
            out.append(one_line(comment).replace("\\|", "|") + "\n")
        if len(reached[name]) > 1:
            out.append("Also at %s; the paths below use the first.\n" %
                       ", ".join("`%s`" % path for path in reached[name][1:]))
        out.append("| path | type | meaning |")
        out.append("|---|---|---|")
        for field, field_comment in zip(message.field, field_comments):
            type_name = type_of(field, messages, enums)[0]
            if name == root and field.HasField("oneof_index"):
                path = "`kind: %s`" % field.type_name.rsplit(".", 1)[1]
            else:
                path = "`%s%s`" % (prefix, field.name)
            out.append("| %s | %s | %s |" % (path, type_name, one_line(field_comment)))
        out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed page instead of writing it")
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args()
    text = render(*load(args.protoc, os.path.join(ROOT, "proto")))
    if not args.check:
        with open(args.output, "w") as f:
            f.write(text)
        return 0
    try:
        current = open(args.output).read()
    except FileNotFoundError:
        current = None
    if current == text:
        return 0
    print("%s is not what proto/mpsd/v1/mpsd.proto's comments make it; rewrite it with\n"
          "  %s %s\nand commit it." % (args.output, sys.executable, os.path.abspath(__file__)), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
