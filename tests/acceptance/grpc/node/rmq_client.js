// The unmodified RocketMQ 5 Node.js client (rocketmq-client-nodejs), driven as its own process by
// tests/grpc/test_node_client.py: the same scenarios and JSON-line events as ../rmq_client.py.
//
//   node tests/grpc/node/rmq_client.js ENDPOINT SCENARIO --topic T [options]
//
// Scenarios: send, commit, rollback, orphan (--answer COMMIT|ROLLBACK|UNKNOWN|RAISE, --seconds),
// receive (--group, --count, --ack, --invisible, --seconds).  It logs to ~/logs/rocketmq/.
'use strict';

const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

function say(event) {
  process.stdout.write(JSON.stringify(event) + '\n');
}

function parse(argv) {
  const [endpoint, scenario, ...rest] = argv;
  const args = { endpoint, scenario, body: 'hello', count: 1, answer: 'COMMIT', seconds: 0,
    invisible: 30, ack: false, ak: '', sk: '', tag: '', group: '', expression: '*' };
  for (let i = 0; i < rest.length; i++) {
    const name = rest[i].replace(/^--/, '');
    if (name === 'ack') { args.ack = true; continue; }
    const value = rest[++i];
    args[name] = ['count', 'seconds', 'invisible'].includes(name) ? Number(value) : value;
  }
  return args;
}

function options(args) {
  const common = { endpoints: args.endpoint, namespace: '', requestTimeout: 10000 };
  if (args.ak) common.sessionCredentials = { accessKey: args.ak, accessSecret: args.sk };
  return common;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function produce(args) {
  const checker = {
    async check(view) {
      say({ event: 'checked', message_id: view.messageId, topic: view.topic, body: view.body.toString() });
      if (args.answer === 'RAISE') throw new Error('the checker failed on purpose');
      return { COMMIT: TransactionResolution.COMMIT, ROLLBACK: TransactionResolution.ROLLBACK,
        UNKNOWN: TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED }[args.answer];
    },
  };
  const producer = new Producer({ ...options(args), topics: [args.topic], checker });
  await producer.startup();
  say({ event: 'started', client_id: producer.clientId });
  try {
    for (let i = 0; i < args.count; i++) {
      const body = args.count > 1 ? `${args.body}-${i}` : args.body;
      const message = { topic: args.topic, body: Buffer.from(body), keys: [`key-${body}`],
        properties: new Map([['origin', 'rmq-nodejs']]) };
      if (args.tag) message.tag = args.tag;
      try {
        if (args.scenario === 'send') {
          const receipt = await producer.send(message);
          say({ event: 'sent', message_id: receipt.messageId, body, at: Date.now() / 1000 });
          continue;
        }
        const transaction = producer.beginTransaction();
        const receipt = await producer.send(message, transaction);
        say({ event: 'half', message_id: receipt.messageId, transaction_id: receipt.transactionId, body });
        if (args.scenario === 'commit') await transaction.commit();
        if (args.scenario === 'rollback') await transaction.rollback();
        say({ event: args.scenario, message_id: receipt.messageId });
      } catch (error) {
        say({ event: 'error', type: error.name, message: String(error.message) });
      }
    }
    await sleep(args.seconds * 1000);
  } finally {
    await producer.shutdown();
    say({ event: 'stopped' });
  }
}

async function consume(args) {
  const consumer = new SimpleConsumer({ ...options(args), consumerGroup: args.group,
    subscriptions: new Map().set(args.topic, args.expression), awaitDuration: 2000 });
  await consumer.startup();
  say({ event: 'started', client_id: consumer.clientId });
  const deadline = Date.now() + args.seconds * 1000;
  let received = 0;
  try {
    while (received < args.count && Date.now() < deadline) {
      let messages = [];
      try {
        messages = await consumer.receive(16, args.invisible * 1000);
      } catch (error) {
        say({ event: 'error', type: error.name, message: String(error.message) });
        await sleep(500);
        continue;
      }
      for (const view of messages) {
        received++;
        say({ event: 'received', message_id: view.messageId, body: view.body.toString(),
          tag: view.tag ?? null, keys: [...view.keys].sort(),
          properties: Object.fromEntries(view.properties), delivery_attempt: view.deliveryAttempt,
          corrupted: view.corrupted === true, received_at: Date.now() / 1000 });
        if (args.ack) {
          await consumer.ack(view);
          say({ event: 'acked', message_id: view.messageId });
        }
      }
    }
  } finally {
    await consumer.shutdown();
    say({ event: 'stopped' });
  }
}

async function main() {
  const args = parse(process.argv.slice(2));
  try {
    if (args.scenario === 'receive') await consume(args);
    else await produce(args);
  } catch (error) {
    say({ event: 'error', type: error.name, message: String(error.message) });
    process.exitCode = 1;
  }
  process.exit();
}

main();
