// The report page's inline stylesheet (internal to report_html.cc).
#pragma once

namespace lowbit::eval::report {

const char* stylesheet();

}  // namespace lowbit::eval::report
