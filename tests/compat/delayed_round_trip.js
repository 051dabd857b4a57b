// kafkajs side of the compatibility check: `node delayed_round_trip.js <bootstrap> <buffer> <target>
// <kpd-id> <deliver-at ms>` produces one delayed record with the header contract, then reads the
// target (read_committed) and prints the first record as one JSON line.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, buffer, target, id, deliverAt] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "kpd-compat", brokers: [bootstrap], logLevel: logLevel.ERROR });
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({
    topic: buffer,
    acks: -1,
    messages: [{
      key: "js-key",
      value: "js-value",
      headers: { "kpd-target": target, "kpd-deliver-at": deliverAt, "kpd-id": id, trace: "js-trace" },
    }],
  });
  await producer.disconnect();

  // kafkajs reads through a group; it commits nothing here and the test deletes the group after.
  const consumer = kafka.consumer({ groupId: `kpd-compat-${id}`, readUncommitted: false });
  await consumer.connect();
  await consumer.subscribe({ topic: target, fromBeginning: true });
  const timer = setTimeout(() => {
    console.error(`nothing delivered to ${target} within 60 s`);
    process.exit(1);
  }, 60_000);
  await new Promise((resolve) => {
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        const headers = Object.entries(message.headers).map(([k, v]) => [k, v.toString("utf8")]);
        console.log(JSON.stringify({
          key: message.key.toString("utf8"),
          value: message.value.toString("utf8"),
          timestamp: Number(message.timestamp),
          headers,
        }));
        resolve();
      },
    });
  });
  clearTimeout(timer);
  await consumer.disconnect();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
