#include "tensorpickle.h"

#include <QHash>
#include <QSet>

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace tessera::compute::pickle {

int elementSize(DType type)
{
    switch (type) {
    case DType::Float64:
    case DType::Int64:
        return 8;
    case DType::Float32:
    case DType::Int32:
        return 4;
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int16:
        return 2;
    case DType::Int8:
    case DType::UInt8:
    case DType::Bool:
        return 1;
    }
    return 1;
}

QString storageName(DType type)
{
    switch (type) {
    case DType::Float32:
        return QStringLiteral("FloatStorage");
    case DType::Float64:
        return QStringLiteral("DoubleStorage");
    case DType::Float16:
        return QStringLiteral("HalfStorage");
    case DType::BFloat16:
        return QStringLiteral("BFloat16Storage");
    case DType::Int64:
        return QStringLiteral("LongStorage");
    case DType::Int32:
        return QStringLiteral("IntStorage");
    case DType::Int16:
        return QStringLiteral("ShortStorage");
    case DType::Int8:
        return QStringLiteral("CharStorage");
    case DType::UInt8:
        return QStringLiteral("ByteStorage");
    case DType::Bool:
        return QStringLiteral("BoolStorage");
    }
    return {};
}

QString dtypeName(DType type)
{
    switch (type) {
    case DType::Float32:
        return QStringLiteral("float32");
    case DType::Float64:
        return QStringLiteral("float64");
    case DType::Float16:
        return QStringLiteral("float16");
    case DType::BFloat16:
        return QStringLiteral("bfloat16");
    case DType::Int64:
        return QStringLiteral("int64");
    case DType::Int32:
        return QStringLiteral("int32");
    case DType::Int16:
        return QStringLiteral("int16");
    case DType::Int8:
        return QStringLiteral("int8");
    case DType::UInt8:
        return QStringLiteral("uint8");
    case DType::Bool:
        return QStringLiteral("bool");
    }
    return {};
}

namespace {

// A hostile file can make a pickle program allocate without end; these bound what one file may
// build. A real state dict of a large model needs a few hundred thousand values.
constexpr std::size_t MaxValues = 1 << 20;
constexpr std::size_t MaxStack = 1 << 20;
constexpr int MaxDimensions = 64;

struct Failure {
    QString message;
};

[[noreturn]] void refuse(const QString& message)
{
    throw Failure { message };
}

struct Value;
using Ref = std::shared_ptr<Value>;

struct Value {
    enum class Kind { None, Bool, Int, Float, String, Tuple, List, Dict, Global, Storage, Tensor };
    Kind kind = Kind::None;
    std::int64_t integer = 0;
    double real = 0.0;
    QString text; // a string; a global's "module.name"
    std::vector<Ref> items; // tuple, list
    std::vector<std::pair<Ref, Ref>> entries; // dict, in insertion order
    // A storage: its element type (untyped: bytes), its record and its size in elements.
    DType dtype = DType::UInt8;
    bool untyped = false;
    TensorRef tensor;
};

QString kindName(const Value& value)
{
    switch (value.kind) {
    case Value::Kind::None:
        return QStringLiteral("None");
    case Value::Kind::Bool:
        return QStringLiteral("a bool");
    case Value::Kind::Int:
        return QStringLiteral("an int");
    case Value::Kind::Float:
        return QStringLiteral("a float");
    case Value::Kind::String:
        return QStringLiteral("a string");
    case Value::Kind::Tuple:
        return QStringLiteral("a tuple");
    case Value::Kind::List:
        return QStringLiteral("a list");
    case Value::Kind::Dict:
        return QStringLiteral("a dict");
    case Value::Kind::Global:
        return value.text;
    case Value::Kind::Storage:
        return QStringLiteral("a storage");
    case Value::Kind::Tensor:
        return QStringLiteral("a tensor");
    }
    return {};
}

// The storages and dtypes PyTorch names in a file, and what each holds.
std::optional<DType> storageType(const QString& global)
{
    for (const auto type : { DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
             DType::Int16, DType::Int8, DType::UInt8, DType::Bool }) {
        if (global == QStringLiteral("torch.") + storageName(type))
            return type;
    }
    return std::nullopt;
}

std::optional<DType> dtypeGlobal(const QString& global)
{
    static const QHash<QString, DType> types {
        { QStringLiteral("torch.float32"), DType::Float32 },
        { QStringLiteral("torch.float"), DType::Float32 },
        { QStringLiteral("torch.float64"), DType::Float64 },
        { QStringLiteral("torch.double"), DType::Float64 },
        { QStringLiteral("torch.float16"), DType::Float16 },
        { QStringLiteral("torch.half"), DType::Float16 },
        { QStringLiteral("torch.bfloat16"), DType::BFloat16 },
        { QStringLiteral("torch.int64"), DType::Int64 },
        { QStringLiteral("torch.long"), DType::Int64 },
        { QStringLiteral("torch.int32"), DType::Int32 },
        { QStringLiteral("torch.int"), DType::Int32 },
        { QStringLiteral("torch.int16"), DType::Int16 },
        { QStringLiteral("torch.short"), DType::Int16 },
        { QStringLiteral("torch.int8"), DType::Int8 },
        { QStringLiteral("torch.uint8"), DType::UInt8 },
        { QStringLiteral("torch.bool"), DType::Bool },
    };
    const auto found = types.constFind(global);
    return found == types.cend() ? std::nullopt : std::optional<DType>(*found);
}

// Every global a tensor file may name. Callables build dicts and tensors; the rest are markers.
bool knownGlobal(const QString& global)
{
    static const QSet<QString> known {
        QStringLiteral("collections.OrderedDict"),
        QStringLiteral("torch._utils._rebuild_tensor"),
        QStringLiteral("torch._utils._rebuild_tensor_v2"),
        QStringLiteral("torch._utils._rebuild_tensor_v3"),
        QStringLiteral("torch._utils._rebuild_parameter"),
        QStringLiteral("torch._utils._rebuild_parameter_with_state"),
        QStringLiteral("torch._tensor._rebuild_from_type_v2"),
        QStringLiteral("torch.jit._pickle.restore_type_tag"),
        QStringLiteral("torch.Tensor"),
        QStringLiteral("torch._tensor.Tensor"),
        QStringLiteral("torch.nn.parameter.Parameter"),
        QStringLiteral("torch.storage.UntypedStorage"),
        QStringLiteral("torch.UntypedStorage"),
    };
    return known.contains(global) || storageType(global) || dtypeGlobal(global);
}

class Machine {
public:
    explicit Machine(QByteArrayView data)
        : m_data(data)
    { }

    ~Machine()
    {
        // Containers may refer to each other (even to themselves): empty them all first, so that
        // nothing is freed recursively and nothing leaks.
        for (auto& value : m_all) {
            value->items.clear();
            value->entries.clear();
        }
    }

    Ref run()
    {
        for (;;) {
            const auto op = byte();
            switch (op) {
            case 0x80: // PROTO
                if (byte() > 5)
                    refuse(QStringLiteral("pickle protocol newer than 5"));
                break;
            case 0x95: // FRAME
                take(8);
                break;
            case '.': // STOP
                if (m_stack.size() != 1 || !m_marks.empty())
                    refuse(QStringLiteral("the program does not end with one object"));
                return m_stack.back();
            case '(': // MARK
                m_marks.push_back(m_stack.size());
                break;
            case '0': // POP
                pop();
                break;
            case '1': // POP_MARK
                popToMark();
                break;
            case '2': // DUP
                push(top());
                break;
            case 'N':
                push(make(Value::Kind::None));
                break;
            case 0x88: // NEWTRUE
            case 0x89: { // NEWFALSE
                auto value = make(Value::Kind::Bool);
                value->integer = op == 0x88 ? 1 : 0;
                push(value);
                break;
            }
            case 'J': // BININT
                pushInt(std::int32_t(littleEndian(4)));
                break;
            case 'K': // BININT1
                pushInt(std::int64_t(littleEndian(1)));
                break;
            case 'M': // BININT2
                pushInt(std::int64_t(littleEndian(2)));
                break;
            case 0x8a: { // LONG1
                const auto length = byte();
                if (length > 8)
                    refuse(QStringLiteral("an integer wider than 64 bits"));
                std::uint64_t bits = length == 0 ? 0 : littleEndian(length);
                if (length > 0 && length < 8 && (bits >> (length * 8 - 1)) & 1)
                    bits |= ~std::uint64_t(0) << (length * 8); // sign-extend
                pushInt(std::int64_t(bits));
                break;
            }
            case 'G': { // BINFLOAT, big-endian
                const auto bytes = take(8);
                std::uint64_t bits = 0;
                for (int i = 0; i < 8; ++i)
                    bits = (bits << 8) | std::uint8_t(bytes[i]);
                auto value = make(Value::Kind::Float);
                std::memcpy(&value->real, &bits, sizeof bits);
                push(value);
                break;
            }
            case 'X': // BINUNICODE
                pushString(take(littleEndian(4)));
                break;
            case 0x8c: // SHORT_BINUNICODE
                pushString(take(byte()));
                break;
            case 0x8d: // BINUNICODE8
                pushString(take(littleEndian(8)));
                break;
            case 'U': // SHORT_BINSTRING
                pushString(take(byte()));
                break;
            case 'T': // BINSTRING
                pushString(take(littleEndian(4)));
                break;
            case ')': // EMPTY_TUPLE
                push(make(Value::Kind::Tuple));
                break;
            case 0x85: // TUPLE1
            case 0x86: // TUPLE2
            case 0x87: { // TUPLE3
                const std::size_t count = std::size_t(op - 0x84);
                if (m_stack.size() - floor() < count)
                    refuse(QStringLiteral("a tuple of missing values"));
                auto tuple = make(Value::Kind::Tuple);
                tuple->items.assign(m_stack.end() - std::ptrdiff_t(count), m_stack.end());
                m_stack.resize(m_stack.size() - count);
                push(tuple);
                break;
            }
            case 't': { // TUPLE
                auto tuple = make(Value::Kind::Tuple);
                tuple->items = popToMark();
                push(tuple);
                break;
            }
            case ']': // EMPTY_LIST
                push(make(Value::Kind::List));
                break;
            case 'l': { // LIST
                auto list = make(Value::Kind::List);
                list->items = popToMark();
                push(list);
                break;
            }
            case 'a': { // APPEND
                auto item = pop();
                auto list = top();
                if (list->kind != Value::Kind::List)
                    refuse(QStringLiteral("APPEND to %1").arg(kindName(*list)));
                list->items.push_back(item);
                break;
            }
            case 'e': { // APPENDS
                auto items = popToMark();
                auto list = top();
                if (list->kind != Value::Kind::List)
                    refuse(QStringLiteral("APPENDS to %1").arg(kindName(*list)));
                list->items.insert(list->items.end(), items.begin(), items.end());
                break;
            }
            case '}': // EMPTY_DICT
                push(make(Value::Kind::Dict));
                break;
            case 'd': { // DICT
                auto dict = make(Value::Kind::Dict);
                addEntries(*dict, popToMark());
                push(dict);
                break;
            }
            case 's': { // SETITEM
                auto value = pop();
                auto key = pop();
                addEntries(*dictOnTop(), { key, value });
                break;
            }
            case 'u': { // SETITEMS
                auto items = popToMark();
                addEntries(*dictOnTop(), items);
                break;
            }
            case 'c': { // GLOBAL
                const auto module = line();
                const auto name = line();
                pushGlobal(module + u'.' + name);
                break;
            }
            case 0x93: { // STACK_GLOBAL
                auto name = pop();
                auto module = pop();
                if (module->kind != Value::Kind::String || name->kind != Value::Kind::String)
                    refuse(QStringLiteral("STACK_GLOBAL of something that is not a name"));
                pushGlobal(module->text + u'.' + name->text);
                break;
            }
            case 'R': { // REDUCE
                auto arguments = pop();
                auto callable = pop();
                push(call(*callable, *arguments));
                break;
            }
            case 'b': { // BUILD: the state of an OrderedDict (state_dict()'s _metadata) or a tensor
                pop(); // ignored
                auto target = top();
                if (target->kind != Value::Kind::Dict && target->kind != Value::Kind::Tensor)
                    refuse(QStringLiteral("BUILD of %1").arg(kindName(*target)));
                break;
            }
            case 'Q': // BINPERSID
                push(persistent(*pop()));
                break;
            case 'q': // BINPUT
                memoize(littleEndian(1));
                break;
            case 'r': // LONG_BINPUT
                memoize(littleEndian(4));
                break;
            case 0x94: // MEMOIZE
                memoize(std::uint64_t(m_memo.size()));
                break;
            case 'h': // BINGET
                recall(littleEndian(1));
                break;
            case 'j': // LONG_BINGET
                recall(littleEndian(4));
                break;
            default:
                refuse(QStringLiteral("pickle opcode 0x%1, which a tensor file does not use").arg(op, 2, 16, QLatin1Char('0')));
            }
        }
    }

private:
    std::uint8_t byte()
    {
        if (m_position >= m_data.size())
            refuse(QStringLiteral("the pickle program ends early"));
        return std::uint8_t(m_data[m_position++]);
    }

    QByteArrayView take(std::uint64_t count)
    {
        if (count > std::uint64_t(m_data.size() - m_position))
            refuse(QStringLiteral("the pickle program ends early"));
        const auto view = m_data.sliced(m_position, qsizetype(count));
        m_position += qsizetype(count);
        return view;
    }

    std::uint64_t littleEndian(int bytes)
    {
        const auto data = take(std::uint64_t(bytes));
        std::uint64_t value = 0;
        for (int i = bytes - 1; i >= 0; --i)
            value = (value << 8) | std::uint8_t(data[i]);
        return value;
    }

    QString line()
    {
        const auto end = m_data.indexOf('\n', m_position);
        if (end < 0 || end - m_position > 256)
            refuse(QStringLiteral("a global's name is cut short or too long"));
        const auto text = QString::fromUtf8(m_data.sliced(m_position, end - m_position));
        m_position = end + 1;
        return text;
    }

    Ref make(Value::Kind kind)
    {
        if (m_all.size() >= MaxValues)
            refuse(QStringLiteral("more than %1 values").arg(MaxValues));
        auto value = std::make_shared<Value>();
        value->kind = kind;
        m_all.push_back(value);
        return value;
    }

    void push(Ref value)
    {
        if (m_stack.size() >= MaxStack)
            refuse(QStringLiteral("the pickle stack grows past %1").arg(MaxStack));
        m_stack.push_back(std::move(value));
    }

    std::size_t floor() const { return m_marks.empty() ? 0 : m_marks.back(); }

    Ref pop()
    {
        if (m_stack.size() <= floor())
            refuse(QStringLiteral("the pickle stack runs empty"));
        auto value = std::move(m_stack.back());
        m_stack.pop_back();
        return value;
    }

    Ref top()
    {
        if (m_stack.size() <= floor())
            refuse(QStringLiteral("the pickle stack runs empty"));
        return m_stack.back();
    }

    std::vector<Ref> popToMark()
    {
        if (m_marks.empty())
            refuse(QStringLiteral("no MARK to return to"));
        const auto mark = m_marks.back();
        m_marks.pop_back();
        std::vector<Ref> items(m_stack.begin() + std::ptrdiff_t(mark), m_stack.end());
        m_stack.resize(mark);
        return items;
    }

    void pushInt(std::int64_t value)
    {
        auto integer = make(Value::Kind::Int);
        integer->integer = value;
        push(integer);
    }

    void pushString(QByteArrayView bytes)
    {
        auto text = make(Value::Kind::String);
        text->text = QString::fromUtf8(bytes);
        push(text);
    }

    void pushGlobal(const QString& name)
    {
        if (!knownGlobal(name))
            refuse(QStringLiteral("the file names %1, which a file of tensors does not need").arg(name));
        auto global = make(Value::Kind::Global);
        global->text = name;
        push(global);
    }

    void memoize(std::uint64_t index)
    {
        if (m_stack.empty())
            refuse(QStringLiteral("a memo entry of nothing"));
        if (m_memo.size() >= qsizetype(MaxValues) && !m_memo.contains(index))
            refuse(QStringLiteral("more than %1 memo entries").arg(MaxValues));
        m_memo.insert(index, m_stack.back());
    }

    void recall(std::uint64_t index)
    {
        const auto found = m_memo.constFind(index);
        if (found == m_memo.cend())
            refuse(QStringLiteral("a memo entry that was never stored"));
        push(*found);
    }

    Ref dictOnTop()
    {
        auto dict = top();
        if (dict->kind != Value::Kind::Dict)
            refuse(QStringLiteral("SETITEM on %1").arg(kindName(*dict)));
        return dict;
    }

    static void addEntries(Value& dict, const std::vector<Ref>& flat)
    {
        if (flat.size() % 2 != 0)
            refuse(QStringLiteral("a dict with a key and no value"));
        for (std::size_t i = 0; i < flat.size(); i += 2)
            dict.entries.emplace_back(flat[i], flat[i + 1]);
    }

    static std::int64_t integerOf(const Value& value, const QString& what)
    {
        if (value.kind != Value::Kind::Int)
            refuse(QStringLiteral("%1 is %2, not an int").arg(what, kindName(value)));
        return value.integer;
    }

    static QList<std::int64_t> integersOf(const Value& value, const QString& what)
    {
        if (value.kind != Value::Kind::Tuple && value.kind != Value::Kind::List)
            refuse(QStringLiteral("%1 is %2, not a tuple of ints").arg(what, kindName(value)));
        if (value.items.size() > std::size_t(MaxDimensions))
            refuse(QStringLiteral("%1 has more than %2 dimensions").arg(what).arg(MaxDimensions));
        QList<std::int64_t> numbers;
        for (const auto& item : value.items) {
            const auto number = integerOf(*item, what);
            if (number < 0)
                refuse(QStringLiteral("%1 holds a negative number").arg(what));
            numbers.append(number);
        }
        return numbers;
    }

    static const Value& argument(const Value& arguments, std::size_t index, const QString& function)
    {
        if (arguments.kind != Value::Kind::Tuple || arguments.items.size() <= index)
            refuse(QStringLiteral("%1 is called with too few arguments").arg(function));
        return *arguments.items[index];
    }

    // persistent_load: ('storage', storage type, key, location, numel) names a record of the archive.
    Ref persistent(const Value& id)
    {
        if (id.kind != Value::Kind::Tuple || id.items.size() != 5 || id.items[0]->kind != Value::Kind::String
            || id.items[0]->text != u"storage" || id.items[1]->kind != Value::Kind::Global
            || id.items[2]->kind != Value::Kind::String)
            refuse(QStringLiteral("a persistent id that is not a storage"));
        auto storage = make(Value::Kind::Storage);
        const auto& type = id.items[1]->text;
        if (const auto dtype = storageType(type)) {
            storage->dtype = *dtype;
        } else if (type == u"torch.storage.UntypedStorage" || type == u"torch.UntypedStorage") {
            storage->dtype = DType::UInt8;
            storage->untyped = true;
        } else {
            refuse(QStringLiteral("a storage of type %1").arg(type));
        }
        storage->text = id.items[2]->text;
        storage->integer = integerOf(*id.items[4], QStringLiteral("a storage's size"));
        if (storage->integer < 0 || storage->text.isEmpty() || storage->text.size() > 64)
            refuse(QStringLiteral("a storage with a bad key or size"));
        return storage;
    }

    Ref tensor(const Value& storage, const Value& offset, const Value& sizes, const Value& strides,
        std::optional<DType> dtype = std::nullopt)
    {
        if (storage.kind != Value::Kind::Storage)
            refuse(QStringLiteral("a tensor built from %1, not from a storage").arg(kindName(storage)));
        auto result = make(Value::Kind::Tensor);
        auto& ref = result->tensor;
        ref.dtype = dtype.value_or(storage.dtype);
        ref.storageKey = storage.text;
        ref.storageNumel = storage.integer;
        if (storage.untyped) {
            if (!dtype)
                refuse(QStringLiteral("a tensor on an untyped storage without a dtype"));
            ref.storageNumel = storage.integer / elementSize(*dtype);
        } else if (dtype && *dtype != storage.dtype) {
            refuse(QStringLiteral("a tensor whose dtype differs from its storage's"));
        }
        ref.offset = integerOf(offset, QStringLiteral("a tensor's storage offset"));
        ref.sizes = integersOf(sizes, QStringLiteral("a tensor's size"));
        ref.strides = integersOf(strides, QStringLiteral("a tensor's stride"));
        if (ref.sizes.size() != ref.strides.size())
            refuse(QStringLiteral("a tensor with %1 sizes and %2 strides").arg(ref.sizes.size()).arg(ref.strides.size()));
        if (ref.offset < 0)
            refuse(QStringLiteral("a tensor with a negative storage offset"));
        // The view must lie inside its storage: the last element it reaches is below storageNumel.
        bool empty = false;
        std::int64_t last = ref.offset;
        for (qsizetype i = 0; i < ref.sizes.size(); ++i) {
            if (ref.sizes[i] == 0)
                empty = true;
            std::int64_t reach = 0;
            if (ref.sizes[i] > 0
                && (__builtin_mul_overflow(ref.sizes[i] - 1, ref.strides[i], &reach)
                    || __builtin_add_overflow(last, reach, &last)))
                refuse(QStringLiteral("a tensor whose size overflows"));
        }
        if (!empty && last >= ref.storageNumel)
            refuse(QStringLiteral("a tensor that reaches past the end of its storage"));
        return result;
    }

    Ref call(const Value& callable, const Value& arguments)
    {
        if (callable.kind != Value::Kind::Global)
            refuse(QStringLiteral("REDUCE of %1, which is not callable here").arg(kindName(callable)));
        const auto& function = callable.text;
        if (arguments.kind != Value::Kind::Tuple)
            refuse(QStringLiteral("%1 called without an argument tuple").arg(function));
        if (function == u"collections.OrderedDict") {
            auto dict = make(Value::Kind::Dict);
            if (!arguments.items.empty()) { // OrderedDict([(key, value), ...])
                const auto& pairs = *arguments.items[0];
                if (pairs.kind != Value::Kind::List && pairs.kind != Value::Kind::Tuple)
                    refuse(QStringLiteral("OrderedDict of %1").arg(kindName(pairs)));
                for (const auto& pair : pairs.items) {
                    if (pair->kind != Value::Kind::Tuple || pair->items.size() != 2)
                        refuse(QStringLiteral("OrderedDict of something that is not pairs"));
                    dict->entries.emplace_back(pair->items[0], pair->items[1]);
                }
            }
            return dict;
        }
        if (function == u"torch._utils._rebuild_tensor_v2" || function == u"torch._utils._rebuild_tensor")
            return tensor(argument(arguments, 0, function), argument(arguments, 1, function), argument(arguments, 2, function),
                argument(arguments, 3, function));
        if (function == u"torch._utils._rebuild_tensor_v3") {
            const auto& dtype = argument(arguments, 6, function);
            const auto type = dtype.kind == Value::Kind::Global ? dtypeGlobal(dtype.text) : std::nullopt;
            if (!type)
                refuse(QStringLiteral("a tensor of dtype %1").arg(kindName(dtype)));
            return tensor(argument(arguments, 0, function), argument(arguments, 1, function), argument(arguments, 2, function),
                argument(arguments, 3, function), type);
        }
        if (function == u"torch._utils._rebuild_parameter" || function == u"torch._utils._rebuild_parameter_with_state"
            || function == u"torch.jit._pickle.restore_type_tag") {
            const auto& inner = argument(arguments, 0, function);
            if (function != u"torch.jit._pickle.restore_type_tag" && inner.kind != Value::Kind::Tensor)
                refuse(QStringLiteral("a parameter of %1").arg(kindName(inner)));
            return arguments.items[0];
        }
        if (function == u"torch._tensor._rebuild_from_type_v2") { // (rebuild, type, arguments, state)
            const auto& inner = argument(arguments, 0, function);
            const auto& type = argument(arguments, 1, function);
            if (type.kind != Value::Kind::Global
                || (type.text != u"torch.Tensor" && type.text != u"torch._tensor.Tensor"
                    && type.text != u"torch.nn.parameter.Parameter"))
                refuse(QStringLiteral("a tensor subclass %1").arg(kindName(type)));
            return call(inner, argument(arguments, 2, function));
        }
        refuse(QStringLiteral("%1 is not something a file of tensors calls").arg(function));
    }

    QByteArrayView m_data;
    qsizetype m_position = 0;
    std::vector<Ref> m_stack;
    std::vector<std::size_t> m_marks;
    QHash<std::uint64_t, Ref> m_memo;
    std::vector<Ref> m_all;
};

} // namespace

core::Result<QList<TensorRef>> readTensorMap(QByteArrayView pickle)
{
    const QString field = QStringLiteral("tensors");
    try {
        Machine machine(pickle);
        const auto root = machine.run();
        if (root->kind != Value::Kind::Dict)
            return core::Error {
                field,
                QStringLiteral("the file holds %1, not a dict of tensors (torch.save({name: tensor, ...}))").arg(kindName(*root))
            };
        QList<TensorRef> tensors;
        QSet<QString> names;
        for (const auto& [key, value] : root->entries) {
            if (key->kind != Value::Kind::String)
                return core::Error { field, QStringLiteral("a key is %1, not a name").arg(kindName(*key)) };
            if (value->kind != Value::Kind::Tensor)
                return core::Error { field, QStringLiteral("'%1' is %2, not a tensor").arg(key->text, kindName(*value)) };
            if (names.contains(key->text))
                return core::Error { field, QStringLiteral("'%1' appears twice").arg(key->text) };
            names.insert(key->text);
            auto tensor = value->tensor;
            tensor.name = key->text;
            tensors.append(tensor);
        }
        return tensors;
    } catch (const Failure& failure) {
        return core::Error { field, QStringLiteral("not a file of tensors: %1").arg(failure.message) };
    } catch (const std::bad_alloc&) {
        return core::Error { field, QStringLiteral("not a file of tensors: out of memory while reading it") };
    }
}

} // namespace tessera::compute::pickle
