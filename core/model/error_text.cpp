// error_text: c10::Error's message without its backtrace (c10 only, no torch headers).
#include "core/model/error_text.hpp"

#include <c10/util/Exception.h>

namespace actorpipe {

std::string error_text(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

}  // namespace actorpipe
