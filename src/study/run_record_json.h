// RunRecord <-> nlohmann JSON (internal: the public header stays free of third-party includes).
#pragma once
#include <nlohmann/json.hpp>

#include "mixp/study/run_record.h"

namespace mixp::study::detail {

// The train --json fields in the Trainer's order, the curves, the aggregation fields (when
// num_seeds > 1) and the extra fields.
nlohmann::ordered_json run_record_to_json(const RunRecord& r);
// Throws RecordError naming the field that is missing or of the wrong type.
RunRecord run_record_from_json(const nlohmann::json& j);

// A finite number, or null.
nlohmann::ordered_json number_or_null(double v);
nlohmann::ordered_json number_or_null(const std::optional<double>& v);

}  // namespace mixp::study::detail
