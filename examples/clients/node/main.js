// A Node.js client for mpsd over TLS with a bearer token: submits a small Fashion-MNIST TrainJob,
// follows its events (resuming after a dropped stream with after_seq) and prints the outcome.
// No code generation: @grpc/proto-loader reads proto/mpsd/v1/mpsd.proto at run time.
//
// Settings come from the environment:
//   MPSD_ADDRESS     host:port of the daemon's TLS listener, e.g. gpu-box:7070
//   MPSD_CA          the CA certificate (PEM) that signed the daemon's certificate
//   MPSD_TOKEN_FILE  a file holding the token (`mpsd token add --name NAME --role submitter`)
//   MPSD_PROTO_DIR   the checkout's proto/ folder (default: ../../../proto from this file)
//   MPSD_DATA_ROOT   the Fashion-MNIST folder on the daemon's machine (default
//                    /usr/share/datasets/fashion-mnist)
"use strict";
const fs = require("fs");
const path = require("path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

function fail(message) {
  console.error("mpsd-node-example: " + message);
  process.exit(1);
}

const { MPSD_ADDRESS, MPSD_CA, MPSD_TOKEN_FILE } = process.env;
if (!MPSD_ADDRESS || !MPSD_CA || !MPSD_TOKEN_FILE) fail("set MPSD_ADDRESS, MPSD_CA and MPSD_TOKEN_FILE");
const protoDir = process.env.MPSD_PROTO_DIR || path.join(__dirname, "..", "..", "..", "proto");
const dataRoot = process.env.MPSD_DATA_ROOT || "/usr/share/datasets/fashion-mnist";

// longs: Number keeps seq and step counts as numbers (they stay far below 2^53).
const definition = loader.loadSync(path.join(protoDir, "mpsd/v1/mpsd.proto"), {
  includeDirs: [protoDir], keepCase: true, longs: Number, enums: String, defaults: true,
  oneofs: true,
});
const mpsd = grpc.loadPackageDefinition(definition).mpsd.v1;

// TLS with the daemon's CA, and the token on every call. Over TCP mpsd accepts only TLS:
// createInsecure() against its TLS port fails with UNAVAILABLE and no hint of why.
function readSetting(name) {
  try {
    return fs.readFileSync(process.env[name]);
  } catch (err) {
    fail(`${name}: ${err.message}`);
  }
}
const token = readSetting("MPSD_TOKEN_FILE").toString("utf8").trim();
const credentials = grpc.credentials.combineChannelCredentials(
  grpc.credentials.createSsl(readSetting("MPSD_CA")),
  grpc.credentials.createFromMetadataGenerator((_params, callback) => {
    const metadata = new grpc.Metadata();
    metadata.set("authorization", "Bearer " + token);
    callback(null, metadata);
  }));
const client = new mpsd.JobService(MPSD_ADDRESS, credentials);

function call(method, request) {
  return new Promise((resolve, reject) =>
    client[method](request, (err, response) => (err ? reject(err) : resolve(response))));
}

// Resolves when the stream ends (after the job's terminal state event); rejects if it breaks.
function follow(jobId, afterSeq, onEvent) {
  return new Promise((resolve, reject) => {
    const stream = client.StreamEvents({ job_id: jobId, after_seq: afterSeq });
    stream.on("data", onEvent);
    stream.on("end", resolve);
    stream.on("error", reject);
  });
}

async function main() {
  const job = await call("SubmitJob", {
    name: "node-example",
    train_job: {
      model: { name: "convnet" },
      dataset: { name: "fashion-mnist", root: dataRoot, limit_train: 512, limit_test: 256 },
      batch_size: 64, epochs: 1, device: "cpu",
    },
  });
  console.log("submitted job " + job.id);
  let lastSeq = 0;
  for (;;) {
    try {
      await follow(job.id, lastSeq, (event) => {
        if (event.seq > 0) lastSeq = event.seq;
        if (event.epoch) {
          console.log(`epoch ${event.epoch.epoch} test_accuracy ${event.epoch.test_accuracy.toFixed(4)}`);
        }
      });
      break;
    } catch (err) {
      if (err.code !== grpc.status.UNAVAILABLE) throw err;
      console.error(`stream broke (${err.details}); resuming after seq ${lastSeq}`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  const final = await call("GetJob", { job_id: job.id });
  console.log(`job ${final.id} ${final.state}`);
  if (final.state !== "SUCCEEDED") process.exit(1);
}

main().then(() => client.close(), (err) => fail(`${err.code !== undefined ? grpc.status[err.code] + ": " : ""}${err.details || err.message}`));
