// Tensor descriptors and views. A view's data lives wherever its backend
// keeps memory (host for cpu, device for cuda/hip); HostTensor owns host bytes.
#ifndef KERNELSERVE_KERNELS_API_TENSOR_H_
#define KERNELSERVE_KERNELS_API_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/api/dtype.h"

namespace kernelserve {

struct TensorDesc {
  DType dtype = DType::kInvalid;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t dim(int i) const { return shape[i]; }
  int64_t num_elements() const { return NumElements(shape); }
  int64_t num_bytes() const { return NumBytes(dtype, num_elements()); }
  std::string DebugString() const;  // "bf16[2,3,4]"
};

// A non-owning view: descriptor plus a pointer in the backend's memory.
struct TensorView {
  TensorDesc desc;
  void* data = nullptr;

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  bool empty() const { return data == nullptr; }
};

// Host-resident tensor that owns its bytes.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);
  HostTensor(TensorDesc desc, std::vector<uint8_t> bytes);

  const TensorDesc& desc() const { return desc_; }
  DType dtype() const { return desc_.dtype; }
  const Shape& shape() const { return desc_.shape; }
  int64_t num_elements() const { return desc_.num_elements(); }
  int64_t num_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  uint8_t* bytes() { return bytes_.data(); }
  const uint8_t* bytes() const { return bytes_.data(); }
  std::vector<uint8_t>& storage() { return bytes_; }

  template <typename T>
  T* data() { return reinterpret_cast<T*>(bytes_.data()); }
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(bytes_.data()); }

  TensorView view() { return TensorView{desc_, bytes_.data()}; }
  // A const view for inputs; backends never write through input views.
  TensorView view() const { return TensorView{desc_, const_cast<uint8_t*>(bytes_.data())}; }

 private:
  TensorDesc desc_;
  std::vector<uint8_t> bytes_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_API_TENSOR_H_
