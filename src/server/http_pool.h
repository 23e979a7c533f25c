// The thread pool httplib runs `mnemo serve`'s connections on.
#pragma once

#include <httplib.h>

#include <cstddef>

namespace mnemo::server {

/// httplib's task queue for `mnemo serve`: n_core threads always, and up to n_max while every
/// thread is busy. httplib runs one connection per task, from its request line to its last
/// keep-alive request, so clients that send slowly (or stream a long answer) hold threads; the
/// extra threads keep /health, /metrics and other clients answered meanwhile. An extra thread
/// ends after 10 s without work. Beyond n_max, connections wait in order. The caller owns the
/// result (httplib::Server::new_task_queue hands it to the server, which deletes it).
httplib::TaskQueue* new_elastic_pool(size_t n_core, size_t n_max);

}  // namespace mnemo::server
