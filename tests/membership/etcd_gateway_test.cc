// The etcd v3 JSON gateway codec: bodies as etcd 3.4 sends them (captured
// from a real server), and what it must reject.
#include "etcd_gateway.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::membership::etcd {
namespace {

TEST(Base64, RoundTripsEveryLengthAndByte) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    bytes.push_back(static_cast<char>(i * 37));
    const std::string text = base64_encode(bytes);
    EXPECT_EQ(text.size() % 4, 0u);
    std::optional<std::string> back = base64_decode(text);
    ASSERT_TRUE(back.has_value()) << text;
    EXPECT_EQ(*back, bytes);
  }
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode(""), "");
}

TEST(Base64, RejectsAnythingNotCanonical) {
  for (const char* bad :
       {"Zm9", "Zm9v=", "Zm=v", "Z===", "====", "Zm8", "Zg=", "Zm9v\n", "Zm 9v", "Zh==", "Zm9=", "Zg==Zg==", "-_=="}) {
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
  }
}

TEST(PrefixRangeEnd, IncrementsTheLastByteThatCan) {
  EXPECT_EQ(prefix_range_end("/a/"), "/a0");
  EXPECT_EQ(prefix_range_end(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(prefix_range_end(std::string("\xff", 1)), std::string(1, '\0'));
  EXPECT_EQ(prefix_range_end(""), std::string(1, '\0'));
}

TEST(Encode, RequestsUseBase64KeysAndStringInt64s) {
  EXPECT_EQ(encode_put("foo", "bar", 0), R"({"key":"Zm9v","value":"YmFy"})");
  EXPECT_EQ(encode_put("foo", "", 7), R"({"key":"Zm9v","lease":"7","value":""})");
  EXPECT_EQ(encode_range(KeySpan::exactly("foo")), R"({"key":"Zm9v"})");
  EXPECT_EQ(encode_range(KeySpan::prefix("fo")), R"({"key":"Zm8=","range_end":"ZnA="})");
  EXPECT_EQ(encode_range(KeySpan::prefix("")), R"({"key":"AA==","range_end":"AA=="})") << "every key";
  EXPECT_EQ(encode_cas("k", 0, Mutation::put("k", "v", 5)),
            R"({"compare":[{"key":"aw==","mod_revision":"0","result":"EQUAL","target":"MOD"}],)"
            R"("success":[{"request_put":{"key":"aw==","lease":"5","value":"dg=="}}]})");
  EXPECT_EQ(encode_cas("k", 12, Mutation::erase("k")),
            R"({"compare":[{"key":"aw==","mod_revision":"12","result":"EQUAL","target":"MOD"}],)"
            R"("success":[{"request_delete_range":{"key":"aw=="}}]})");
  EXPECT_EQ(encode_watch_create(KeySpan::prefix("p"), 42),
            R"({"create_request":{"key":"cA==","range_end":"cQ==","start_revision":"42"}})");
  EXPECT_EQ(encode_lease_grant(2), R"({"TTL":"2"})");
  EXPECT_EQ(encode_lease_id(4111120193257221398), R"({"ID":"4111120193257221398"})");
}

constexpr const char* kHeader =
    R"("header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"7","raft_term":"2"})";

TEST(Decode, RangeAsEtcdSendsIt) {
  const std::string body = std::string("{") + kHeader +
                           R"(,"kvs":[{"key":"bGs=","create_revision":"7","mod_revision":"7","version":"1",)"
                           R"("value":"dg==","lease":"4111120193257221398"}],"count":"1"})";
  Result<RangeResult> r = decode_range(body);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().revision, 7);
  ASSERT_EQ(r.value().kvs.size(), 1u);
  const KeyValue& kv = r.value().kvs[0];
  EXPECT_EQ(kv.key, "lk");
  EXPECT_EQ(kv.value, "v");
  EXPECT_EQ(kv.create_revision, 7);
  EXPECT_EQ(kv.mod_revision, 7);
  EXPECT_EQ(kv.version, 1);
  EXPECT_EQ(kv.lease, 4111120193257221398);

  Result<RangeResult> empty = decode_range(std::string("{") + kHeader + "}");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty.value().kvs.empty()) << "no kvs field: nothing found";
}

TEST(Decode, OmittedFieldsAreDefaults) {
  // Failed transaction: etcd leaves out "succeeded": false.
  Result<TxnResult> lost = decode_txn(std::string("{") + kHeader + "}");
  ASSERT_TRUE(lost.ok());
  EXPECT_FALSE(lost.value().succeeded);
  EXPECT_EQ(lost.value().revision, 7);
  Result<TxnResult> won = decode_txn(
      std::string("{") + kHeader + R"(,"succeeded":true,"responses":[{"response_put":{"header":{"revision":"8"}}}]})");
  ASSERT_TRUE(won.ok());
  EXPECT_TRUE(won.value().succeeded);
  Result<DeleteResult> none = decode_delete(std::string("{") + kHeader + "}");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.value().deleted, 0);
  Result<DeleteResult> one = decode_delete(std::string("{") + kHeader + R"(,"deleted":"1"})");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one.value().deleted, 1);
}

TEST(Decode, LeasesAndTheirExpiry) {
  Result<Lease> lease = decode_lease_grant(std::string("{") + kHeader + R"(,"ID":"4111120193257221385","TTL":"5"})");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease.value().id, 4111120193257221385);
  EXPECT_EQ(lease.value().ttl_seconds, 5);
  Result<int64_t> alive =
      decode_keep_alive(std::string(R"({"result":{)") + kHeader + R"(,"ID":"4111120193257221398","TTL":"3"}})");
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(alive.value(), 3);
  // etcd's answer to a keep-alive of a revoked or expired lease: no TTL.
  Result<int64_t> gone =
      decode_keep_alive(std::string(R"({"result":{)") + kHeader + R"(,"ID":"4111120193257221398"}})");
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
}

TEST(Decode, GatewayErrorsMapToCodes) {
  const std::string not_found =
      R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})";
  EXPECT_EQ(decode_error(404, not_found).code(), Code::kNotFound);
  EXPECT_NE(decode_error(404, not_found).message().find("requested lease not found"), std::string::npos);
  EXPECT_EQ(decode_put(not_found).status().code(), Code::kNotFound) << "an error object in a 200 body too";
  EXPECT_EQ(decode_error(400, R"({"error":"x","code":3})").code(), Code::kInvalidArgument);
  EXPECT_EQ(decode_error(500, R"({"error":{"grpc_code":11,"message":"compacted"}})").code(), Code::kOutOfRange);
  const Status text = decode_error(404, "Not Found\n");
  EXPECT_EQ(text.code(), Code::kUnavailable);
  EXPECT_NE(text.message().find("HTTP 404"), std::string::npos) << text.to_string();
  EXPECT_EQ(decode_error(503, std::string("\0\x01\xff", 3)).code(), Code::kUnavailable);
}

TEST(Decode, MalformedBodiesAreUnavailableNotCrashes) {
  const std::vector<std::string> bad = {
      "",
      "{",
      "null",
      "[1,2]",
      R"({"header":{}})",
      R"({"header":{"revision":"0"}})",
      R"({"header":{"revision":"-3"}})",
      R"({"header":{"revision":"99999999999999999999"}})",
      R"({"header":{"revision":18446744073709551615}})",
      R"({"header":{"revision":"7 "}})",
      R"({"header":{"revision":7.5}})",
      R"({"header":[]})",
      R"({"header":{"revision":"7"},"kvs":{}})",
      R"({"header":{"revision":"7"},"kvs":[7]})",
      R"({"header":{"revision":"7"},"kvs":[{"key":"a=="}]})",
      R"({"header":{"revision":"7"},"kvs":[{"key":"YQ==","mod_revision":"9"}]})",
      R"({"header":{"revision":"7"},"kvs":[{"key":"YQ==","mod_revision":"5","create_revision":"6"}]})",
      R"({"header":{"revision":"7"},"kvs":[{"key":7,"mod_revision":"5"}]})",
  };
  for (const std::string& body : bad) {
    Result<RangeResult> r = decode_range(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), Code::kUnavailable) << body << " -> " << r.status().to_string();
  }
  EXPECT_FALSE(decode_txn(R"({"header":{"revision":"7"},"succeeded":"yes"})").ok());
  EXPECT_FALSE(decode_lease_grant(std::string("{") + kHeader + R"(,"ID":"0","TTL":"5"})").ok());
  EXPECT_FALSE(decode_keep_alive(std::string("{") + kHeader + "}").ok()) << "no result";
}

TEST(WatchStream, SplitsMessagesWhateverTheChunking) {
  const std::string stream =
      std::string(R"({"result":{)") + kHeader + R"(,"created":true}})" + "\n" + R"({"result":{)" + kHeader +
      R"(,"events":[{"kv":{"key":"cDE=","create_revision":"9","mod_revision":"9","version":"1","value":"MQ=="}}]}})" +
      "\n" + R"({"result":{)" + kHeader + R"(,"events":[{"type":"DELETE","kv":{"key":"cDE=","mod_revision":"11"}}]}})" +
      "\n";
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, stream.size()}) {
    WatchStreamDecoder decoder;
    std::vector<WatchMessage> messages;
    for (size_t i = 0; i < stream.size(); i += chunk) {
      ASSERT_TRUE(decoder.feed(std::string_view(stream).substr(i, chunk), &messages).ok());
    }
    ASSERT_TRUE(decoder.finish(&messages).ok());
    ASSERT_EQ(messages.size(), 3u) << "chunk " << chunk;
    EXPECT_TRUE(messages[0].created);
    EXPECT_EQ(messages[0].header_revision, 7);
    ASSERT_EQ(messages[1].events.size(), 1u);
    EXPECT_EQ(messages[1].events[0].type, Event::Type::kPut);
    EXPECT_EQ(messages[1].events[0].kv.key, "p1");
    EXPECT_EQ(messages[1].events[0].kv.value, "1");
    ASSERT_EQ(messages[2].events.size(), 1u);
    EXPECT_EQ(messages[2].events[0].type, Event::Type::kDelete);
    EXPECT_EQ(messages[2].events[0].revision(), 11);
    EXPECT_EQ(messages[2].events[0].kv.create_revision, 0);
  }
}

TEST(WatchStream, CancellationForCompactionIsReported) {
  // Captured from etcd 3.4 for a watch from a compacted revision: the cancel's
  // header has no revision.
  const std::string stream =
      R"({"result":{"header":{"cluster_id":"16852641557184054374","member_id":"9009370488483034218","revision":"6","raft_term":"2"},"created":true}})"
      "\n"
      R"({"result":{"header":{"cluster_id":"16852641557184054374","member_id":"9009370488483034218","raft_term":"2"},"canceled":true,"compact_revision":"4"}})"
      "\n";
  WatchStreamDecoder decoder;
  std::vector<WatchMessage> messages;
  const Status s = decoder.feed(stream, &messages);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_TRUE(messages[0].created);
  EXPECT_TRUE(messages[1].canceled);
  EXPECT_EQ(messages[1].compact_revision, 4);
  EXPECT_EQ(messages[1].header_revision, 0);
}

TEST(WatchStream, BadLinesAndOverlongLinesPoisonTheStream) {
  WatchStreamDecoder decoder(64);
  std::vector<WatchMessage> messages;
  EXPECT_FALSE(decoder.feed(std::string(100, 'x'), &messages).ok()) << "no newline within the bound";
  EXPECT_FALSE(decoder.feed("\n", &messages).ok()) << "an error is sticky";

  WatchStreamDecoder bad_type;
  EXPECT_FALSE(bad_type
                   .feed(std::string(R"({"result":{)") + kHeader +
                             R"(,"events":[{"type":"EXPLODE","kv":{"key":"","mod_revision":"3"}}]}})" + "\n",
                         &messages)
                   .ok());
  WatchStreamDecoder no_result;
  EXPECT_FALSE(no_result.feed("{}\n", &messages).ok());
  WatchStreamDecoder error_line;
  const Status s = error_line.feed(R"({"error":{"grpc_code":3,"message":"bad request"}})"
                                   "\n",
                                   &messages);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(messages.empty());
}

}  // namespace
}  // namespace ferry::membership::etcd
