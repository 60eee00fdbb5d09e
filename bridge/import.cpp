// bridge/import.cpp - `shmbox-bridge import --into BOX`: pulls the stream
// with a durable consumer, at most the box's free slots at a time, posts, and
// acks only what the box took (a refusal is nak'ed for later).
#include <nats/nats.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bridge.hpp"
#include "shmbox/box.hpp"
#include "shmbox/heir.hpp"
#include "shmbox/inspect.hpp"
#include "shmbox/owner.hpp"
#include "shmbox/producer.hpp"

namespace shmbox_bridge {

namespace {

using namespace std::chrono_literals;

// The free slots of the box's default lane now (where a message without a
// lane goes): what a fetch may take. A message for a full other lane is
// refused by its post and nak'ed.
std::uint32_t free_slots(const shmbox::Box& box) {
  const std::uint32_t lane = box.default_lane();
  const std::uint64_t cap = box.capacity(lane), depth = box.depth_approx(lane);
  return depth >= cap ? 0 : static_cast<std::uint32_t>(cap - depth);
}

}  // namespace

int run_import(import_args a) {
  auto box = shmbox::Box::open(a.into);
  if (!box) return die(shmbox::explain(box.error()));
  auto producer = shmbox::Producer::attach(*box);
  if (!producer) return die(shmbox::explain(producer.error()));
  const shmbox::box_info info = shmbox::info(*box);
  std::string error;
  auto st = bridge_status::open(a.into, bridge_role::import_, info.mode, error);
  if (!st) return die(error);
  nats_link link;
  if (!connect(link, a, nullptr, true, error)) return die(error);

  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, link.js, a.stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return die(describe_stream_error(a, s, jerr) + "; the import reads an existing stream (an export bridge with --create-stream makes one)");
  if (a.subject.empty()) {
    if (si->Config != nullptr && si->Config->SubjectsLen == 1) a.subject = si->Config->Subjects[0];
  }
  jsStreamInfo_Destroy(si);
  if (a.subject.empty()) return die("stream '" + a.stream + "' has several subjects: pass --subject to say which one to import");

  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = a.stream.c_str();
  so.Config.AckPolicy = js_AckExplicit;
  so.Config.MaxAckPending = static_cast<int64_t>(a.max_batch) * 4;
  // How soon JetStream delivers again what a killed import fetched and never acked.
  so.Config.AckWait = static_cast<int64_t>(a.ack_wait_ms) * 1000000;
  natsSubscription* sub = nullptr;
  s = js_PullSubscribe(&sub, link.js, a.subject.c_str(), a.durable.c_str(), nullptr, &so, &jerr);
  if (s != NATS_OK)
    return die("cannot pull from stream '" + a.stream + "' with durable '" + a.durable + "': " + nats_error(s) +
               (jerr != 0 ? " (JetStream error " + std::to_string(jerr) + ")" : ""));
  st->activate(a.url, a.stream, a.subject, a.durable);
  std::cout << "ready import " << a.into << " stream=" << a.stream << " durable=" << a.durable << std::endl;

  std::uint64_t last_seq = 0;
  int rc = kExitOk;
  while (!g_stop.load() && rc == kExitOk) {
    const std::uint32_t room = std::min(free_slots(*box), a.max_batch);
    if (room == 0) {
      std::this_thread::sleep_for(2ms);  // the owner frees slots; no one wakes an outside producer for that
      continue;
    }
    natsMsgList list{};
    s = natsSubscription_Fetch(&list, sub, static_cast<int>(room), 250, &jerr);
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) {
      if (list.Msgs != nullptr) natsMsgList_Destroy(&list);
      std::this_thread::sleep_for(100ms);  // reconnecting; the durable keeps our place
      continue;
    }
    bool refused = false;  // the box refused one: nak the rest of the fetch too (they would be refused)
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* m = list.Msgs[i];
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
        if (meta->NumDelivered > 1) {
          st->add(bridge_counter::redeliveries);
        } else if (last_seq != 0 && meta->Sequence.Stream > last_seq + 1) {
          st->add(bridge_counter::remote_drops, meta->Sequence.Stream - last_seq - 1);
        }
        last_seq = std::max(last_seq, meta->Sequence.Stream);
        jsMsgMetaData_Destroy(meta);
      }
      if (refused) {
        natsMsg_NakWithDelay(m, a.nak_delay_ms, nullptr);
        st->add(bridge_counter::naks);
        continue;
      }
      shmbox::post_options po;
      const char* lane = nullptr;
      if (natsMsgHeader_Get(m, "Shmbox-Lane", &lane) == NATS_OK && lane != nullptr) {
        char* end = nullptr;
        const unsigned long v = std::strtoul(lane, &end, 10);
        if (end != lane && *end == '\0' && v < box->lane_count()) po.lane = static_cast<std::uint32_t>(v);
      }
      const shmbox::post_status ps = producer->post(natsMsg_GetData(m), static_cast<std::size_t>(natsMsg_GetDataLength(m)), po);
      switch (ps) {
        case shmbox::post_status::stored:
        case shmbox::post_status::stored_evicted:
        case shmbox::post_status::dropped:
          natsMsg_Ack(m, nullptr);
          st->add(bridge_counter::imported);
          if (ps == shmbox::post_status::dropped) st->add(bridge_counter::local_drops);
          if (ps == shmbox::post_status::stored_evicted) st->add(bridge_counter::local_drops, producer->last_evicted());
          break;
        case shmbox::post_status::full:
        case shmbox::post_status::timeout:
          natsMsg_NakWithDelay(m, a.nak_delay_ms, nullptr);
          st->add(bridge_counter::naks);
          refused = true;
          break;
        case shmbox::post_status::too_large:
          std::cerr << "shmbox-bridge: a message of " << natsMsg_GetDataLength(m) << " bytes is larger than box '" << a.into
                    << "' takes (" << box->slot_size() << "); terminated in the stream (counted as too_large by the box)\n";
          natsMsg_Term(m, nullptr);
          st->add(bridge_counter::local_drops);
          break;
        case shmbox::post_status::error:
          natsMsg_Nak(m, nullptr);
          st->add(bridge_counter::naks);
          rc = die(shmbox::explain(producer->last_error()));
          refused = true;
          break;
      }
    }
    natsMsgList_Destroy(&list);
    if (refused) {
      // Fetch nothing until the nak'ed ones are due again: JetStream hands
      // out due redeliveries before newer messages, so the lane keeps its
      // order (a fetch now would post newer messages ahead of them).
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.nak_delay_ms) + 20ms;
      while (!g_stop.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    }
  }
  natsSubscription_Destroy(sub);
  if (rc == kExitOk)
    std::cout << "stopped import " << a.into << " imported=" << st->get(bridge_counter::imported) << std::endl;
  return rc;
}
}  // namespace shmbox_bridge
