// Byte encoding of negotiation messages (wire.h).
//
// Layout: u32 magic, u16 version, then the payload; integers little-endian, doubles as
// their IEEE bit pattern, strings and vectors as a u32 count followed by the items.
// Every rank runs the same build, so there is no schema evolution: a different
// version is an error, not something to adapt to.
//
// Encoding runs on every negotiation, so it appends into one reserved buffer with
// memcpy. Decoding trusts nothing: every count is checked against the bytes that
// remain before anything is allocated, every enum against its range, and bytes left
// over after the last item are an error, so a corrupt message fails loudly with its
// byte offset instead of turning into a wild read or a huge allocation.
#include "runtime/wire.h"

#include <accord/error.h>

#include <bit>
#include <cstring>
#include <string>
#include <type_traits>

namespace accord {

namespace {

constexpr std::uint32_t kRequestMagic = 0x51524341;   // "ACRQ" in little-endian bytes
constexpr std::uint32_t kResponseMagic = 0x53524341;  // "ACRS"
constexpr std::uint16_t kVersion = 1;

template <typename T>
T toLittleEndian(T v) {
  static_assert(std::is_unsigned_v<T>);
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    T out = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) out = (out << 8) | ((v >> (8 * i)) & 0xff);
    return out;
  }
  return v;
}

// ---- encoding -------------------------------------------------------------------

class Writer {
 public:
  explicit Writer(std::size_t reserve) { buf_.reserve(reserve); }

  template <typename U>
  void uint(U v) {
    v = toLittleEndian(v);
    raw(&v, sizeof v);
  }
  void u8(std::uint8_t v) { buf_.push_back(v); }
  void u32(std::uint32_t v) { uint(v); }
  void i32(std::int32_t v) { uint(static_cast<std::uint32_t>(v)); }
  void u64(std::uint64_t v) { uint(v); }
  void f64(double v) { uint(std::bit_cast<std::uint64_t>(v)); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void i64s(const std::vector<std::int64_t>& v) {
    u32(static_cast<std::uint32_t>(v.size()));
    if constexpr (std::endian::native == std::endian::little) {
      raw(v.data(), v.size() * sizeof(std::int64_t));
    } else {
      for (std::int64_t x : v) u64(static_cast<std::uint64_t>(x));
    }
  }
  void header(std::uint32_t magic) {
    u32(magic);
    uint(kVersion);
  }
  std::vector<std::uint8_t> take() { return std::move(buf_); }

 private:
  void raw(const void* p, std::size_t n) {
    if (n == 0) return;
    std::size_t at = buf_.size();
    buf_.resize(at + n);
    std::memcpy(buf_.data() + at, p, n);
  }
  std::vector<std::uint8_t> buf_;
};

// The encoders, decoders and fixed sizes below list every field by hand: these counts
// make a field added to a message fail the build here until it is listed.
static_assert(detail::fieldCount<RequestSignature>() == 12, "encode and decode the new field");
static_assert(detail::fieldCount<Request>() == 1 + 2, "encode and decode the new field");
static_assert(detail::fieldCount<Device>() == 2, "encode and decode the new field");
static_assert(detail::fieldCount<Response>() == 12, "encode and decode the new field");

// Fixed part of one request: everything except the strings' and vectors' items.
constexpr std::size_t kRequestFixedBytes =
    4 + 8 + 1 + 4 + 1 + 1 + 1 + 4 + 4 + 4 + 8 + 8 + 4 + 4 + 4;
// Fixed part of one response.
constexpr std::size_t kResponseFixedBytes = 1 + 4 + 4 + 1 + 1 + 1 + 4 + 4 + 8 + 8 + 4 + 4 + 1;

std::size_t requestBytes(const Request& r) {
  return kRequestFixedBytes + r.name.size() + r.group.size() +
         8 * (r.shape.size() + r.splits.size());
}

std::size_t responseBytes(const Response& r) {
  std::size_t n = kResponseFixedBytes + r.error.size() + 8 * r.rank_rows.size();
  for (const auto& name : r.names) n += 4 + name.size();
  for (const auto& shape : r.shapes) n += 4 + 8 * shape.size();
  return n;
}

void device(Writer& w, const Device& d) {
  w.u8(static_cast<std::uint8_t>(d.type));
  w.i32(d.index);
}

void encodeRequest(Writer& w, const Request& r) {
  w.i32(r.rank);
  w.u64(r.seq);
  w.u8(static_cast<std::uint8_t>(r.type));
  w.str(r.name);
  w.u8(static_cast<std::uint8_t>(r.dtype));
  w.u8(static_cast<std::uint8_t>(r.op));
  device(w, r.device);
  w.i64s(r.shape);
  w.i32(r.root);
  w.f64(r.prescale);
  w.f64(r.postscale);
  w.i64s(r.splits);
  w.str(r.group);
  w.i32(r.group_size);
}

void encodeResponse(Writer& w, const Response& r) {
  w.u8(static_cast<std::uint8_t>(r.type));
  w.u32(static_cast<std::uint32_t>(r.names.size()));
  for (const auto& name : r.names) w.str(name);
  w.u32(static_cast<std::uint32_t>(r.shapes.size()));
  for (const auto& shape : r.shapes) w.i64s(shape);
  w.u8(static_cast<std::uint8_t>(r.dtype));
  w.u8(static_cast<std::uint8_t>(r.op));
  device(w, r.device);
  w.i32(r.root);
  w.f64(r.prescale);
  w.f64(r.postscale);
  w.i64s(r.rank_rows);
  w.str(r.error);
  w.u8(static_cast<std::uint8_t>(r.error_kind));
}

// ---- decoding -------------------------------------------------------------------

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  // What is being decoded, for error messages ("request 3"); set per item.
  void item(const char* kind, std::size_t index) {
    kind_ = kind;
    index_ = index;
  }

  template <typename U>
  U uint(const char* field) {
    need(sizeof(U), field);
    U v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return toLittleEndian(v);
  }
  std::uint8_t u8(const char* field) { return uint<std::uint8_t>(field); }
  std::uint32_t u32(const char* field) { return uint<std::uint32_t>(field); }
  std::int32_t i32(const char* field) { return static_cast<std::int32_t>(u32(field)); }
  std::uint64_t u64(const char* field) { return uint<std::uint64_t>(field); }
  double f64(const char* field) { return std::bit_cast<double>(u64(field)); }

  // Reads a one-byte enum and rejects values from `count` (the enum's kNum*) on.
  template <typename E>
  E enumeration(const char* field, int count) {
    static_assert(sizeof(E) == 1, "enums travel as one byte");
    std::size_t at = pos_;
    std::uint8_t v = u8(field);
    if (v >= count) {
      fail("value " + std::to_string(v) + " at byte " + std::to_string(at) +
               " is out of range (0.." + std::to_string(count - 1) + ")",
           field);
    }
    return static_cast<E>(v);
  }

  // Reads a u32 count of items of at least `item_bytes` each and checks that they fit.
  // `what` names the count ("string length"), `field` the value it belongs to.
  std::uint32_t count(const char* what, std::size_t item_bytes, const char* field) {
    std::size_t at = pos_;
    std::uint32_t n = u32(field);
    if (static_cast<std::uint64_t>(n) * item_bytes > left()) {
      fail(std::string(what) + " " + std::to_string(n) + " at byte " + std::to_string(at) +
               " exceeds the " + std::to_string(left()) + " bytes left",
           field);
    }
    return n;
  }

  std::string str(const char* field) {
    std::uint32_t n = count("string length", 1, field);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  std::vector<std::int64_t> i64s(const char* field) {
    std::uint32_t n = count("vector length", 8, field);
    std::vector<std::int64_t> v(n);
    if constexpr (std::endian::native == std::endian::little) {
      if (n > 0) std::memcpy(v.data(), bytes_.data() + pos_, 8 * std::size_t{n});
      pos_ += 8 * std::size_t{n};
    } else {
      for (auto& x : v) x = static_cast<std::int64_t>(u64(field));
    }
    return v;
  }

  void header(std::uint32_t magic, const char* what) {
    std::uint32_t got = u32("list header");
    if (got != magic) {
      fail("magic word 0x" + hex(got) + " is not that of a " + what + " (0x" + hex(magic) + ")");
    }
    std::uint16_t version = uint<std::uint16_t>("list header");
    if (version != kVersion) {
      fail("version " + std::to_string(version) + ", this build speaks version " +
           std::to_string(kVersion) + ": every rank must run the same Accord build");
    }
  }

  void finish(const char* what) {
    kind_ = nullptr;  // past the last item
    if (left() != 0) {
      fail(std::to_string(left()) + " trailing bytes at byte " + std::to_string(pos_) +
           " after the last " + what);
    }
  }

  std::size_t left() const { return bytes_.size() - pos_; }

  // The message ends with where the reader was: "(request 2 name)".
  [[noreturn]] void fail(const std::string& what, const char* field = nullptr) const {
    std::string msg = "corrupt negotiation message: " + what;
    if (kind_ != nullptr || field != nullptr) {
      msg += " (";
      if (kind_ != nullptr) msg += std::string(kind_) + " " + std::to_string(index_);
      if (kind_ != nullptr && field != nullptr) msg += ' ';
      if (field != nullptr) msg += field;
      msg += ')';
    }
    throw CommError(msg);
  }

 private:
  void need(std::size_t n, const char* field) {
    if (n > left()) {
      fail("truncated at byte " + std::to_string(pos_) + ": needs " + std::to_string(n) +
               " bytes, " + std::to_string(left()) + " left",
           field);
    }
  }
  static std::string hex(std::uint32_t v) {
    static const char* digits = "0123456789abcdef";
    std::string s(8, '0');
    for (int i = 7; i >= 0; --i, v >>= 4) s[i] = digits[v & 0xf];
    return s;
  }

  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
  const char* kind_ = nullptr;
  std::size_t index_ = 0;
};

Device device(Reader& r) {
  Device d;
  d.type = r.enumeration<DeviceType>("device type", kNumDeviceTypes);
  d.index = r.i32("device index");
  return d;
}

Request decodeRequest(Reader& r) {
  Request q;
  q.rank = r.i32("rank");
  q.seq = r.u64("seq");
  q.type = r.enumeration<RequestType>("request type", kNumRequestTypes);
  q.name = r.str("name");
  q.dtype = r.enumeration<DType>("dtype", kNumDTypes);
  q.op = r.enumeration<ReduceOp>("reduce op", kNumReduceOps);
  q.device = device(r);
  q.shape = r.i64s("shape");
  q.root = r.i32("root");
  q.prescale = r.f64("prescale");
  q.postscale = r.f64("postscale");
  q.splits = r.i64s("splits");
  q.group = r.str("group");
  q.group_size = r.i32("group size");
  return q;
}

Response decodeResponse(Reader& r) {
  Response p;
  p.type = r.enumeration<ResponseType>("response type", kNumResponseTypes);
  p.names.resize(r.count("name count", 4, "names"));
  for (auto& name : p.names) name = r.str("name");
  p.shapes.resize(r.count("shape count", 4, "shapes"));
  for (auto& shape : p.shapes) shape = r.i64s("shape");
  p.dtype = r.enumeration<DType>("dtype", kNumDTypes);
  p.op = r.enumeration<ReduceOp>("reduce op", kNumReduceOps);
  p.device = device(r);
  p.root = r.i32("root");
  p.prescale = r.f64("prescale");
  p.postscale = r.f64("postscale");
  p.rank_rows = r.i64s("rank rows");
  p.error = r.str("error");
  p.error_kind = r.enumeration<Response::ErrorKind>(
      "error kind", static_cast<int>(Response::ErrorKind::Invalid) + 1);
  return p;
}

}  // namespace

std::vector<std::uint8_t> encodeRequests(const std::vector<Request>& requests) {
  std::size_t bytes = 4 + 2 + 4;
  for (const auto& r : requests) bytes += requestBytes(r);
  Writer w(bytes);
  w.header(kRequestMagic);
  w.u32(static_cast<std::uint32_t>(requests.size()));
  for (const auto& r : requests) encodeRequest(w, r);
  return w.take();
}

std::vector<Request> decodeRequests(std::span<const std::uint8_t> bytes) {
  Reader r(bytes);
  r.header(kRequestMagic, "request list");
  std::vector<Request> requests(r.count("request count", kRequestFixedBytes, "list header"));
  for (std::size_t i = 0; i < requests.size(); ++i) {
    r.item("request", i);
    requests[i] = decodeRequest(r);
  }
  r.finish("request");
  return requests;
}

std::vector<std::uint8_t> encodeResponses(const ResponseList& list) {
  std::size_t bytes = 4 + 2 + 1 + 4;
  for (const auto& r : list.responses) bytes += responseBytes(r);
  Writer w(bytes);
  w.header(kResponseMagic);
  w.u8(list.shutdown ? 1 : 0);
  w.u32(static_cast<std::uint32_t>(list.responses.size()));
  for (const auto& r : list.responses) encodeResponse(w, r);
  return w.take();
}

ResponseList decodeResponses(std::span<const std::uint8_t> bytes) {
  Reader r(bytes);
  r.header(kResponseMagic, "response list");
  ResponseList list;
  std::uint8_t shutdown = r.u8("shutdown flag");
  if (shutdown > 1)
    r.fail("value " + std::to_string(shutdown) + " at byte 6 is not 0 or 1", "shutdown flag");
  list.shutdown = shutdown == 1;
  list.responses.resize(r.count("response count", kResponseFixedBytes, "list header"));
  for (std::size_t i = 0; i < list.responses.size(); ++i) {
    r.item("response", i);
    list.responses[i] = decodeResponse(r);
  }
  r.finish("response");
  return list;
}

}  // namespace accord
