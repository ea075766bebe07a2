#include "wire_parse.h"

#include <string>
#include <vector>

#include <grpcpp/impl/codegen/proto_buffer_reader.h>

namespace clusterd::wire {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

constexpr int kMaxDepth = 64;

// Length of the valid UTF-8 sequence at p[0..n), or 0 if it is invalid (the
// rules protobuf applies: no overlong forms, no surrogates, <= U+10FFFF).
size_t Utf8SequenceLength(const unsigned char* p, size_t n) {
  auto cont = [](unsigned char c) { return (c & 0xC0) == 0x80; };
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return n >= 2 && cont(p[1]) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return n >= 3 && p[1] >= lo && p[1] <= hi && cont(p[2]) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return n >= 4 && p[1] >= lo && p[1] <= hi && cont(p[2]) && cont(p[3]) ? 4 : 0;
  }
  return 0;
}

void ScrubString(char* data, size_t size) {
  auto* p = reinterpret_cast<unsigned char*>(data);
  size_t i = 0;
  while (i < size) {
    const size_t len = Utf8SequenceLength(p + i, size - i);
    if (len == 0) {
      p[i++] = 0;
    } else {
      i += len;
    }
  }
}

bool ReadVarint(const char*& p, const char* end, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const auto b = static_cast<unsigned char>(*p++);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

bool Scrub(char* data, size_t size, const Descriptor* type, int depth) {
  if (depth > kMaxDepth) return false;
  const char* p = data;
  const char* end = data + size;
  while (p < end) {
    uint64_t tag = 0;
    if (!ReadVarint(p, end, &tag)) return false;
    const int number = static_cast<int>(tag >> 3);
    switch (tag & 7) {
      case 0: {  // varint
        uint64_t ignored;
        if (!ReadVarint(p, end, &ignored)) return false;
        break;
      }
      case 1:  // 64-bit
        if (end - p < 8) return false;
        p += 8;
        break;
      case 5:  // 32-bit
        if (end - p < 4) return false;
        p += 4;
        break;
      case 2: {  // length-delimited
        uint64_t len = 0;
        if (!ReadVarint(p, end, &len) || len > static_cast<uint64_t>(end - p)) return false;
        char* field = data + (p - data);
        const FieldDescriptor* fd = type->FindFieldByNumber(number);
        if (fd && fd->type() == FieldDescriptor::TYPE_STRING) {
          ScrubString(field, len);
        } else if (fd && fd->type() == FieldDescriptor::TYPE_MESSAGE) {
          if (!Scrub(field, len, fd->message_type(), depth + 1)) return false;
        }
        p += len;
        break;
      }
      default:  // groups (not in proto3) or garbage
        return false;
    }
  }
  return true;
}

}  // namespace

bool ScrubInvalidUtf8(char* data, size_t size, const Descriptor* type) { return Scrub(data, size, type, 0); }

grpc::Status LenientDeserialize(grpc::ByteBuffer* buffer, google::protobuf::Message* msg) {
  if (buffer == nullptr) return grpc::Status(grpc::StatusCode::INTERNAL, "No payload");
  {
    grpc::ProtoBufferReader reader(buffer);
    if (!reader.status().ok()) return reader.status();
    if (msg->ParseFromZeroCopyStream(&reader)) {
      buffer->Clear();
      return grpc::Status::OK;
    }
  }
  // The common reason a well-formed request does not parse is a string that
  // is not UTF-8: make it one the validators refuse by name.
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer->Dump(&slices).ok()) {
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  buffer->Clear();
  msg->Clear();
  if (ScrubInvalidUtf8(bytes.data(), bytes.size(), msg->GetDescriptor()) && msg->ParseFromString(bytes)) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request does not parse as " + msg->GetTypeName());
}

}  // namespace clusterd::wire

namespace grpc {
#define CLUSTERD_DEFINE_LENIENT(T)                                                                   \
  template <>                                                                                        \
  Status SerializationTraits<T, void>::Deserialize(ByteBuffer* buffer, protobuf::MessageLite* msg) { \
    return clusterd::wire::LenientDeserialize(buffer, static_cast<T*>(msg));                         \
  }
CLUSTERD_LENIENT_REQUESTS(CLUSTERD_DEFINE_LENIENT)
#undef CLUSTERD_DEFINE_LENIENT
}  // namespace grpc
