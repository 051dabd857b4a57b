// Java kafka-clients side of the compatibility check, run as `java -cp <kafka libs> DelayedRoundTrip.java
// <bootstrap> <buffer topic> <target topic> <kpd-id> <deliver-at ms>`: produce one delayed record with
// the header contract, then read the target (read_committed) and print the first record as one JSON line.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class DelayedRoundTrip {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], buffer = args[1], target = args[2], id = args[3], deliverAt = args[4];
        Properties producerProps = new Properties();
        producerProps.put("bootstrap.servers", bootstrap);
        producerProps.put("acks", "all");
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(producerProps, new StringSerializer(), new StringSerializer())) {
            ProducerRecord<String, String> record = new ProducerRecord<>(buffer, "java-key", "java-value");
            record.headers()
                    .add("kpd-target", utf8(target))
                    .add("kpd-deliver-at", utf8(deliverAt))
                    .add("kpd-id", utf8(id))
                    .add("trace", utf8("java-trace"));
            producer.send(record).get();
        }
        Properties consumerProps = new Properties();
        consumerProps.put("bootstrap.servers", bootstrap);
        consumerProps.put("isolation.level", "read_committed");
        consumerProps.put("enable.auto.commit", "false");
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(consumerProps, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = consumer.partitionsFor(target).stream()
                    .map(p -> new TopicPartition(target, p.partition()))
                    .collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> delivered : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(json(delivered));
                    return;
                }
            }
        }
        System.err.println("nothing delivered to " + target + " within 60 s");
        System.exit(1);
    }

    static byte[] utf8(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    static String quoted(byte[] bytes) {
        if (bytes == null) return "null";
        String text = new String(bytes, StandardCharsets.UTF_8);
        return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String json(ConsumerRecord<byte[], byte[]> record) {
        StringBuilder headers = new StringBuilder();
        for (Header header : record.headers()) {
            if (headers.length() > 0) headers.append(",");
            headers.append("[").append(quoted(utf8(header.key()))).append(",").append(quoted(header.value())).append("]");
        }
        return "{\"key\":" + quoted(record.key()) + ",\"value\":" + quoted(record.value())
                + ",\"timestamp\":" + record.timestamp() + ",\"headers\":[" + headers + "]}";
    }
}
