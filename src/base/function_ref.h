// function_ref: a non-owning reference to a callable (like C++26 std::function_ref), for callbacks
// that run only during the call they are passed to. Unlike std::function it never allocates, so
// hot paths (the model's per-chunk GEMM callbacks) stay allocation-free. The referenced callable
// must outlive every call through the reference.
#pragma once
#include <type_traits>
#include <utility>

namespace ms {

template <class Sig>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                              std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): used like a function parameter
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...); }) {}

  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace ms
